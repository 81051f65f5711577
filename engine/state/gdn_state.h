// Recurrent state of one sequence's Gated DeltaNet layers (MODEL_SPEC 4.5, 4.10): per
// layer, the convolution history and the delta-rule state. Both are constant in size
// (independent of the context length) and start at zero for a new sequence. One buffer
// of the device running those layers holds all of it, conv histories first, so a
// snapshot is two copies on that device, or on a CPU one copy of the conv histories and
// an exchange of buffers (engine/split/snapshot.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

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
    int64_t ssm_rows() const { return nv_ * dv_; }  // one layer's rows of ssm_row() floats

    // A state read from elsewhere (StateSnapshot::save on a device whose delta rule can
    // read its state from another buffer at no cost, Ops::gdn_recurrent_from): until layer
    // l is next written, its delta-rule state is the one in `src` (a snapshot's buffer of
    // the same shape, which holds it), not ssm(l), so a verify window's snapshot takes no
    // copy of the delta-rule states. The conv histories stay here. Whoever reads or
    // writes the states other than through the delta rule settles first (snapshot.h).
    void read_from(const GdnState& src) {
        src_ = src.ssm(0);
        unread_.assign(static_cast<size_t>(n_layers_), 1);
        n_unread_ = n_layers_;
        if (n_unread_ == 0) src_ = nullptr;
    }
    // Where layer l's delta-rule state is now: src's while it has not been written since
    // read_from, else ssm(l).
    const float* ssm_in(int64_t l) const {
        return src_ && unread_[static_cast<size_t>(l)] ? src_ + l * ssm_size() : ssm(l);
    }
    // Layer l's state was written to ssm(l) (from ssm_in(l)).
    void wrote(int64_t l) {
        if (!src_ || !unread_[static_cast<size_t>(l)]) return;
        unread_[static_cast<size_t>(l)] = 0;
        if (--n_unread_ == 0) src_ = nullptr;
    }
    bool reads_elsewhere() const { return src_ != nullptr; }
    // Forget the other buffer: every ssm(l) now holds its layer's state (after a copy of
    // the pending layers, or a write of the whole buffer).
    void read_here() { src_ = nullptr; }
    // Exchanges the buffers of two states of the same shape (a snapshot lending its
    // buffer: StateSnapshot::save).
    void swap_buffer(GdnState& other) { std::swap(mem_, other.mem_); }

private:
    float* base() const { return static_cast<float*>(mem_.data()); }
    int64_t conv_size() const { return conv_rows_ * conv_dim_; }
    int64_t ssm_size() const { return nv_ * dk_ * dv_; }

    int64_t n_layers_, conv_rows_, conv_dim_, nv_, dk_, dv_;
    Buffer mem_;  // [n_layers][K-1][conv_dim], then [n_layers][nv][dv][dk]
    const float* src_ = nullptr;  // read_from's buffer while some layer is unread
    std::vector<char> unread_;    // per layer: its state is still at src_
    int64_t n_unread_ = 0;
};

}  // namespace strata
