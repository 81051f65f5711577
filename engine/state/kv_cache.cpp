#include "engine/state/kv_cache.h"

#include "engine/core/error.h"
#include "engine/quant/quant.h"

namespace strata {

KvCache::KvCache(const Allocator& alloc, int64_t n_layers, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim_k, int64_t head_dim_v,
                 GgmlType type)
    : n_layers_(n_layers), n_ctx_(n_ctx), n_head_kv_(n_head_kv), hd_k_(head_dim_k), hd_v_(head_dim_v), type_(type) {
    STRATA_CHECK(type == GgmlType::F16 || type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::F32,
                 "KV cache type {} is not supported (f16, q8_0, q4_0)", type_info(type).name);
    const int64_t bs = type_info(type).block_size;
    STRATA_CHECK(head_dim_k % bs == 0 && head_dim_v % bs == 0,
                 "KV head sizes {} / {} are not multiples of the {} block size {}", head_dim_k, head_dim_v,
                 type_info(type).name, bs);
    row_k_ = row_bytes(type, head_dim_k);
    row_v_ = row_bytes(type, head_dim_v);
    const auto rows = static_cast<size_t>(n_layers * n_head_kv * n_ctx);
    k_ = alloc(row_k_ * rows);
    v_ = alloc(row_v_ * rows);
}

void KvCache::store(int64_t l, int64_t pos, const float* k, const float* v) {
    STRATA_CHECK(l >= 0 && l < n_layers_ && pos >= 0 && pos < n_ctx_, "KV store out of range: layer {} pos {}", l, pos);
    for (int64_t h = 0; h < n_head_kv_; ++h) {
        quantize_row(type_, k + h * hd_k_, static_cast<uint8_t*>(k_.data()) + index(l, h, pos) * row_k_, hd_k_);
        quantize_row(type_, v + h * hd_v_, static_cast<uint8_t*>(v_.data()) + index(l, h, pos) * row_v_, hd_v_);
    }
}

const uint8_t* KvCache::k_head(int64_t l, int64_t h) const {
    STRATA_CHECK(l >= 0 && l < n_layers_ && h >= 0 && h < n_head_kv_, "KV read out of range: layer {} head {}", l, h);
    return static_cast<uint8_t*>(k_.data()) + index(l, h, 0) * row_k_;
}

const uint8_t* KvCache::v_head(int64_t l, int64_t h) const {
    STRATA_CHECK(l >= 0 && l < n_layers_ && h >= 0 && h < n_head_kv_, "KV read out of range: layer {} head {}", l, h);
    return static_cast<uint8_t*>(v_.data()) + index(l, h, 0) * row_v_;
}

}  // namespace strata
