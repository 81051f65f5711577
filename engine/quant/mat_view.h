// Views of 2-D weights, shared by the kernels (which multiply by them), the backends
// (whose matmul op takes them) and the model (which binds them from the GGUF file).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/quant/types.h"

namespace strata {

// A 2-D weight: n_out rows of n_in values each, row r at data + r * row_stride.
// packed, when set, holds the same weights in the matmul kernels' own layout
// (kernels/cpu/matmul.h: pack_weights); matmul then reads it instead of the rows, with the same results.
struct MatView {
    GgmlType type = GgmlType::F32;
    const void* data = nullptr;
    int64_t n_in = 0;
    int64_t n_out = 0;
    size_t row_stride = 0;  // bytes between rows
    const void* packed = nullptr;

    const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_stride; }
};

// w's rows, packed one after another (row_bytes apart) at dst: the rows as a device
// stores them, whatever the stride of the view they come from.
inline void copy_rows(const MatView& w, void* dst) {
    const size_t rb = row_bytes(w.type, w.n_in);
    for (int64_t r = 0; r < w.n_out; ++r) std::memcpy(static_cast<uint8_t*>(dst) + rb * static_cast<size_t>(r), w.row(r), rb);
}

// One weight of a multi-output product: y [T, w.n_out] with row stride ldy.
struct MatOut {
    MatView w;
    float* y;
    int64_t ldy;
};

// An activation [T, n_in] f32 with row stride ldx (floats), read by one or more MatOuts.
// Two optional forms spare the caller a pass over the rows (the products compute them
// as they read each row, in parallel): rows, the activation's row t is x's row rows[t]
// (an MoE expert's tokens, gathered without a copy); gate, the activation is
// silu(gate) * x element by element (SwiGLU before a down projection), gate laid out
// as x.
struct MatIn {
    const float* x;
    int64_t ldx;
    int64_t T;
    const int32_t* rows = nullptr;
    const float* gate = nullptr;

    bool plain() const { return !rows && !gate; }
    const float* row(int64_t t) const { return x + (rows ? rows[t] : t) * ldx; }
    const float* gate_row(int64_t t) const { return gate + (rows ? rows[t] : t) * ldx; }
};

}  // namespace strata
