// The inputs of a verify window's Gated DeltaNet recurrences, kept so that a rejected
// window rolls back without running its layers again (Runner::rollback, docs/spec.md
// "Rollback"). Per recurrent layer: the window's pre-convolution qkv rows [rows, conv_dim],
// its log-decay rows and its beta rows [rows, nv]. From the state before the window
// (the snapshot) and the first n rows of these, the conv + L2 norm + delta rule of each
// layer rebuild exactly the state after n tokens: the same ops on the same values in the
// same order as a replay, whose matmuls would only recompute them.
//
// Armed by a snapshot taken for a verify window; the next window's gdn_block fills each
// layer once (take()); covers(n) says whether every layer holds n rows. Memory of the
// device running the layers, allocated once per sequence for kRows rows.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/buffer.h"

namespace strata {

class GdnLog {
public:
    static constexpr int64_t kRows = 17;  // the largest verify window: --spec-draft 16 drafts + 1

    static size_t bytes(int64_t n_layers, int64_t conv_dim, int64_t nv) {
        return sizeof(float) * static_cast<size_t>(n_layers * kRows * (conv_dim + 2 * nv));
    }
    GdnLog(const Allocator& alloc, int64_t n_layers, int64_t conv_dim, int64_t nv)
        : conv_dim_(conv_dim), nv_(nv), filled_(static_cast<size_t>(n_layers), -1) {
        mem_ = alloc(bytes(n_layers, conv_dim, nv));
    }

    int64_t conv_dim() const { return conv_dim_; }
    int64_t nv() const { return nv_; }
    size_t size() const { return mem_.size(); }

    // owner: who armed it (a pipelined stage's snapshot slot), so that a rollback can tell
    // whether the rows kept are those of its own window.
    void arm(int owner = 0) {
        armed_ = true;
        owner_ = owner;
        std::fill(filled_.begin(), filled_.end(), -1);
    }
    int owner() const { return owner_; }
    bool armed() const { return armed_; }
    void disarm() { armed_ = false; }
    // Whether layer l's n rows of the window now running go into the log (once per
    // arming; a window of more than kRows rows is not kept: covers() is then false).
    bool take(int64_t l, int64_t n) {
        int64_t& f = filled_[static_cast<size_t>(l)];
        if (!armed_ || f >= 0) return false;
        f = n <= kRows ? n : 0;
        return n <= kRows;
    }
    bool covers(int64_t n) const {
        return armed_ && std::all_of(filled_.begin(), filled_.end(), [n](int64_t f) { return f >= n; });
    }

    float* qkv(int64_t l) const { return base() + l * layer_size(); }               // [kRows, conv_dim]
    float* gate(int64_t l) const { return qkv(l) + kRows * conv_dim_; }             // [kRows, nv] log-decay
    float* beta(int64_t l) const { return gate(l) + kRows * nv_; }                   // [kRows, nv]

private:
    float* base() const { return static_cast<float*>(mem_.data()); }
    int64_t layer_size() const { return kRows * (conv_dim_ + 2 * nv_); }

    int64_t conv_dim_, nv_;
    bool armed_ = false;
    int owner_ = 0;
    std::vector<int64_t> filled_;  // per layer: rows kept since arm() (-1: none yet)
    Buffer mem_;
};

}  // namespace strata
