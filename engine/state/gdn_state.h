// Recurrent state of one sequence's Gated DeltaNet layers (MODEL_SPEC 4.5, 4.10): per
// layer, the convolution history and the delta-rule state. Both are constant in size
// (independent of the context length) and start at zero for a new sequence.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata {

class GdnState {
public:
    // n_layers: recurrent layers only (the model maps its layer index to a slot).
    GdnState(int64_t n_layers, int64_t conv_kernel, int64_t conv_dim, int64_t nv, int64_t dk, int64_t dv);

    int64_t n_layers() const { return n_layers_; }
    int64_t conv_rows() const { return conv_rows_; }
    int64_t conv_dim() const { return conv_dim_; }
    size_t bytes() const { return (conv_.size() + ssm_.size()) * sizeof(float); }

    // [K-1, conv_dim]: the last K-1 pre-convolution qkv inputs, oldest row first.
    float* conv(int64_t l) { return conv_.data() + l * conv_size(); }
    const float* conv(int64_t l) const { return conv_.data() + l * conv_size(); }
    // [nv, dv, dk]: per value head the state S (dk x dv) stored TRANSPOSED, row j = value
    // index holding dk contiguous key-index values (llama.cpp's layout). Each row then
    // evolves independently through one token's update, so the recurrence is one pass
    // of scale / dot / axpy / dot over contiguous memory.
    float* ssm(int64_t l) { return ssm_.data() + l * ssm_size(); }
    const float* ssm(int64_t l) const { return ssm_.data() + l * ssm_size(); }

    void clear();  // back to a fresh sequence

private:
    int64_t conv_size() const { return conv_rows_ * conv_dim_; }
    int64_t ssm_size() const { return nv_ * dk_ * dv_; }

    int64_t n_layers_, conv_rows_, conv_dim_, nv_, dk_, dv_;
    std::vector<float> conv_;  // [n_layers][K-1][conv_dim]
    std::vector<float> ssm_;   // [n_layers][nv][dv][dk]
};

}  // namespace strata
