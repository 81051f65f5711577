// KV cache of one sequence's attention layers. Rows are stored in a block format
// (f16, q8_0 or q4_0: --cache-type), one row per position holding every KV head.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/quant/types.h"

namespace strata {

class KvCache {
public:
    // n_layers: attention layers only (indexed 0..n_layers-1 by the caller's mapping).
    KvCache(int64_t n_layers, int64_t n_ctx, int64_t n_kv_k, int64_t n_kv_v, GgmlType type);

    int64_t n_ctx() const { return n_ctx_; }
    GgmlType type() const { return type_; }
    size_t bytes() const { return k_.size() + v_.size(); }

    // Store position pos of layer l (k: n_kv_k floats, v: n_kv_v floats).
    void store(int64_t l, int64_t pos, const float* k, const float* v);
    // Read head h (head_dim values starting at h * head_dim) of position pos.
    void read_k(int64_t l, int64_t pos, int64_t h, int64_t head_dim, float* out) const;
    void read_v(int64_t l, int64_t pos, int64_t h, int64_t head_dim, float* out) const;

private:
    int64_t n_layers_, n_ctx_, n_kv_k_, n_kv_v_;
    GgmlType type_;
    size_t row_k_, row_v_;      // bytes per position row
    std::vector<uint8_t> k_, v_;  // [n_layers][n_ctx][row]
};

}  // namespace strata
