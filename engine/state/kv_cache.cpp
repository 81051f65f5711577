#include "engine/state/kv_cache.h"

#include "engine/core/error.h"
#include "engine/quant/quant.h"

namespace strata {

KvCache::KvCache(int64_t n_layers, int64_t n_ctx, int64_t n_kv_k, int64_t n_kv_v, GgmlType type)
    : n_layers_(n_layers), n_ctx_(n_ctx), n_kv_k_(n_kv_k), n_kv_v_(n_kv_v), type_(type) {
    STRATA_CHECK(type == GgmlType::F16 || type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::F32,
                 "KV cache type {} is not supported (f16, q8_0, q4_0)", type_info(type).name);
    const int64_t bs = type_info(type).block_size;
    STRATA_CHECK(n_kv_k % bs == 0 && n_kv_v % bs == 0,
                 "KV row sizes {} / {} are not multiples of the {} block size {}", n_kv_k, n_kv_v,
                 type_info(type).name, bs);
    row_k_ = row_bytes(type, n_kv_k);
    row_v_ = row_bytes(type, n_kv_v);
    k_.resize(row_k_ * static_cast<size_t>(n_layers * n_ctx));
    v_.resize(row_v_ * static_cast<size_t>(n_layers * n_ctx));
}

void KvCache::store(int64_t l, int64_t pos, const float* k, const float* v) {
    STRATA_CHECK(l >= 0 && l < n_layers_ && pos >= 0 && pos < n_ctx_, "KV store out of range: layer {} pos {}", l, pos);
    const size_t i = static_cast<size_t>(l * n_ctx_ + pos);
    quantize_row(type_, k, k_.data() + i * row_k_, n_kv_k_);
    quantize_row(type_, v, v_.data() + i * row_v_, n_kv_v_);
}

void KvCache::read_k(int64_t l, int64_t pos, int64_t h, int64_t head_dim, float* out) const {
    const size_t i = static_cast<size_t>(l * n_ctx_ + pos);
    dequantize_row(type_, k_.data() + i * row_k_ + row_bytes(type_, h * head_dim), out, head_dim);
}

void KvCache::read_v(int64_t l, int64_t pos, int64_t h, int64_t head_dim, float* out) const {
    const size_t i = static_cast<size_t>(l * n_ctx_ + pos);
    dequantize_row(type_, v_.data() + i * row_v_ + row_bytes(type_, h * head_dim), out, head_dim);
}

}  // namespace strata
