// Recurrent state of one sequence's Gated DeltaNet layers (MODEL_SPEC 4.5, 4.10): per
// layer, the convolution history and the delta-rule state. Both are constant in size
// (independent of the context length) and start at zero for a new sequence. One buffer
// of the device running those layers holds all of it, conv histories first, so a
// snapshot is two copies on that device (engine/split/snapshot.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/buffer.h"

namespace strata {

class GdnState {
public:
    // n_layers: recurrent layers only (the model maps its layer index to a slot).
    GdnState(const Allocator& alloc, int64_t n_layers, int64_t conv_kernel, int64_t conv_dim, int64_t nv,
             int64_t dk, int64_t dv);

    // A zeroed state of the same shape (a snapshot's buffer), allocated by alloc.
    GdnState like(const Allocator& alloc) const { return {alloc, n_layers_, conv_rows_ + 1, conv_dim_, nv_, dk_, dv_}; }

    int64_t n_layers() const { return n_layers_; }
    int64_t conv_rows() const { return conv_rows_; }
    int64_t conv_dim() const { return conv_dim_; }
    int64_t nv() const { return nv_; }
    size_t bytes() const { return mem_.size(); }

    // [K-1, conv_dim]: the last K-1 pre-convolution qkv inputs, oldest row first.
    float* conv(int64_t l) const { return base() + l * conv_size(); }
    // [nv, dv, dk]: per value head the state S (dk x dv) stored TRANSPOSED, row j = value
    // index holding dk contiguous key-index values (llama.cpp's layout). Each row then
    // evolves independently through one token's update, so the recurrence is one pass
    // of scale / dot / axpy / dot over contiguous memory.
    float* ssm(int64_t l) const { return base() + n_layers_ * conv_size() + l * ssm_size(); }

    // The whole state as rows: every layer's conv history ([n_layers * (K-1), conv_dim]),
    // then every layer's delta-rule state ([n_layers * nv * dv, dk]).
    int64_t all_conv_rows() const { return n_layers_ * conv_rows_; }
    int64_t all_ssm_rows() const { return n_layers_ * nv_ * dv_; }
    int64_t ssm_row() const { return dk_; }

private:
    float* base() const { return static_cast<float*>(mem_.data()); }
    int64_t conv_size() const { return conv_rows_ * conv_dim_; }
    int64_t ssm_size() const { return nv_ * dk_ * dv_; }

    int64_t n_layers_, conv_rows_, conv_dim_, nv_, dk_, dv_;
    Buffer mem_;  // [n_layers][K-1][conv_dim], then [n_layers][nv][dv][dk]
};

}  // namespace strata
