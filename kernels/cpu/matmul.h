// y = x · Wᵀ for a weight matrix in any supported block format. Q8_0, Q4_0, Q4_K, Q6_K,
// IQ4_XS and IQ3_XXS take the integer path (matmul_q.h): each token of x is quantized
// on its own to 8-bit blocks of 32 and multiplied by integer dot products. Other types
// are dequantized on the fly, row by row, and multiplied in f32. Either way each output
// element is one task's fixed sequence of operations: the result for a token does not
// depend on how many tokens share the call, on the number of threads, or (integer path)
// on the instruction set chosen at run time.
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
