// KV cache of one sequence's attention layers. Rows are stored in a block format
// (f16, q8_0 or q4_0: --cache-type), head-major: for each layer and KV head, one row of
// head_dim values per position, the positions side by side. Attention reads one head's
// positions in order, so they are one run of memory (and one conversion call per chunk).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>

#include "engine/core/buffer.h"
#include "engine/quant/types.h"

namespace strata {

class KvCache {
public:
    // n_layers: attention layers only (indexed 0..n_layers-1 by the caller's mapping).
    // head_dim_k / head_dim_v must be whole blocks of the type. The rows are memory of the
    // device that runs the sequence's layers (alloc: its Ops::alloc).
    KvCache(const Allocator& alloc, int64_t n_layers, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k, int64_t head_dim_v, GgmlType type);

    int64_t n_layers() const { return n_layers_; }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_head_kv() const { return n_head_kv_; }
    int64_t head_dim_k() const { return hd_k_; }
    int64_t head_dim_v() const { return hd_v_; }
    GgmlType type() const { return type_; }
    size_t bytes() const { return k_.size() + v_.size(); }

    // Store position pos of layer l (k: n_head_kv * head_dim_k floats, v: n_head_kv *
    // head_dim_v floats, heads side by side), on the host: the CPU backend's kv_store.
    void store(int64_t l, int64_t pos, const float* k, const float* v);
    // Position 0 of KV head h of layer l; position pos is pos * k_stride() (v_stride())
    // bytes further.
    const uint8_t* k_head(int64_t l, int64_t h) const;
    const uint8_t* v_head(int64_t l, int64_t h) const;
    uint8_t* k_head(int64_t l, int64_t h) { return const_cast<uint8_t*>(std::as_const(*this).k_head(l, h)); }
    uint8_t* v_head(int64_t l, int64_t h) { return const_cast<uint8_t*>(std::as_const(*this).v_head(l, h)); }
    size_t k_stride() const { return row_k_; }
    size_t v_stride() const { return row_v_; }

private:
    size_t index(int64_t l, int64_t h, int64_t pos) const {
        return static_cast<size_t>((l * n_head_kv_ + h) * n_ctx_ + pos);
    }

    int64_t n_layers_, n_ctx_, n_head_kv_, hd_k_, hd_v_;
    GgmlType type_;
    size_t row_k_, row_v_;        // bytes per head and position
    Buffer k_, v_;  // [n_layers][n_head_kv][n_ctx][row]
};

}  // namespace strata
