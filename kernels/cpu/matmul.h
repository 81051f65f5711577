// y = x · Wᵀ for a weight matrix in any supported block format. Weights are
// dequantized on the fly, row by row, and each output element is one task's fixed
// sequence of lane-wise products and one fixed reduction: the result for a token does
// not depend on how many tokens share the call or on the number of threads.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/thread_pool.h"
#include "engine/quant/types.h"

namespace strata {

// A 2-D weight: n_out rows of n_in values each, row r at data + r * row_stride.
struct MatView {
    GgmlType type = GgmlType::F32;
    const void* data = nullptr;
    int64_t n_in = 0;
    int64_t n_out = 0;
    size_t row_stride = 0;  // bytes between rows

    const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_stride; }
};

// x: [T, n_in] f32 with row stride ldx (floats); y: [T, n_out] with row stride ldy.
void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
            int64_t ldy);

// Plain reference: each element in double precision. For tests.
void matmul_ref(const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy);

}  // namespace strata
