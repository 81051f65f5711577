#include "kernels/cpu/attention.h"

#include <xmmintrin.h>

#include <algorithm>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/simd_forms.h"

// Every form below must compute what the SSE one does: no a * b + c contracted into an
// FMA (GCC does that by default where the target has FMA).
#pragma GCC optimize("fp-contract=off")

namespace strata::ops {
namespace {

constexpr int64_t kChunk = 32;  // cached rows converted to f32 at a time (they stay in L1)

struct Rows {
    DequantFn fn;
    int64_t n_blocks;  // per row
    size_t row_size;   // bytes per row
    bool packed;       // rows back to back (stride = row_size): one call converts many
    const KvRows* kv;
    // Rows [u0, u0 + n) to dst, `width` floats apart (width = the row's values).
    void get(int64_t u0, int64_t n, float* dst, int64_t width) const {
        const uint8_t* src = kv->base + static_cast<size_t>(u0) * kv->stride;
        if (packed) return fn(src, dst, n * n_blocks);
        for (int64_t r = 0; r < n; ++r) fn(src + static_cast<size_t>(r) * kv->stride, dst + r * width, n_blocks);
    }
    // Asks for rows [u0, u0 + n) (clamped to n_pos) ahead of their get(): a decode step finds
    // the cache in memory, evicted by the weights that streamed since the last step.
    void prefetch(int64_t u0, int64_t n, int64_t n_pos) const {
        n = std::min(n, n_pos - u0);
        if (n <= 0) return;
        const auto* p = reinterpret_cast<const char*>(kv->base + static_cast<size_t>(u0) * kv->stride);
        const size_t span = packed ? static_cast<size_t>(n) * row_size : row_size;
        for (int64_t r = 0; r < (packed ? 1 : n); ++r, p += kv->stride)
            for (size_t o = 0; o < span; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    }
};

// Token i of n_tok (queries at q + i * q_tok, positions [0, n_pos0 + i)):
// s[(i * n_heads + j) * ld + u] = dot(q_j, k_u) * scale for every head j and position u.
// Each cached row is converted once for all the tokens.
void scores(const float* q, int64_t q_tok, int64_t q_stride, int64_t n_tok, int64_t n_heads, int64_t hd, float scale,
            const Rows& k, const Rows& v, int64_t n_pos0, float* kbuf, float* s, int64_t ld) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        const int64_t n_pos = n_pos0 + n_tok - 1;  // the last token's
        for (int64_t u0 = 0; u0 < n_pos; u0 += kChunk) {
            const int64_t n = std::min(kChunk, n_pos - u0);
            k.get(u0, n, kbuf, hd);
            if (u0 + kChunk < n_pos) k.prefetch(u0 + kChunk, kChunk, n_pos);
            else v.prefetch(0, kChunk, n_pos);  // the weighted sum's first rows
            for (int64_t tk = 0; tk < n_tok; ++tk) {
                const float* qt = q + tk * q_tok;
                float* st = s + tk * n_heads * ld;
                const int64_t nt = std::min(n, n_pos0 + tk - u0);  // this token's rows of the chunk
                // Eight dot products at a time, simd::dot's lanes each and one joint hsum (the
                // same tree as hsum): eight heads of one position, or, for the heads left over
                // (a task takes 2-4 heads of a group in decode), eight positions of one head.
                const int64_t j8 = hd % simd::kLanes == 0 ? n_heads / 8 * 8 : 0;
                for (int64_t r = 0; r < nt; ++r) {
                    const float* kr = kbuf + r * hd;
                    for (int64_t j = 0; j < j8; j += 8) {
                        V acc[8];
                        for (int h = 0; h < 8; ++h) acc[h] = simd::zero_as<V>();
                        for (int64_t i = 0; i < hd; i += simd::kLanes) {
                            const V kv = simd::load_as<V>(kr + i);
                            for (int h = 0; h < 8; ++h) acc[h] += simd::load_as<V>(qt + (j + h) * q_stride + i) * kv;
                        }
                        float d[8];
                        simd::hsum8(acc, d);
                        for (int h = 0; h < 8; ++h) st[(j + h) * ld + u0 + r] = d[h] * scale;
                    }
                }
                for (int64_t j = j8; j < n_heads; ++j) {
                    const float* qj = qt + j * q_stride;
                    float* sj = st + j * ld + u0;
                    int64_t r = 0;
                    if (hd % simd::kLanes == 0)
                        for (; r + 8 <= nt; r += 8) {
                            V acc[8];
                            for (int p = 0; p < 8; ++p) acc[p] = simd::zero_as<V>();
                            for (int64_t i = 0; i < hd; i += simd::kLanes) {
                                const V qv = simd::load_as<V>(qj + i);
                                for (int p = 0; p < 8; ++p) acc[p] += qv * simd::load_as<V>(kbuf + (r + p) * hd + i);
                            }
                            float d[8];
                            simd::hsum8(acc, d);
                            for (int p = 0; p < 8; ++p) sj[r + p] = d[p] * scale;
                        }
                    for (; r < nt; ++r) sj[r] = simd::dot_as<V>(qj, kbuf + r * hd, hd) * scale;
                }
            }
        }
    });
}

// Each head's row of s (ld >= n_pos values, a multiple of simd::kLanes) becomes its
// softmax over [0, n_pos): m = the lanes' maximum (a fixed tree), e = simd::exp(s - m),
// sum = simd::hsum of the lanes' sums (positions n_pos .. ld - 1 are -inf, so e = 0 and add
// nothing), then e * (1 / sum).
void softmax_rows(float* s, int64_t n_heads, int64_t ld, int64_t n_pos) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        for (int64_t j = 0; j < n_heads; ++j) {
            float* row = s + j * ld;
            std::fill(row + n_pos, row + ld, -__builtin_inff());
            V m = simd::splat_as<V>(-__builtin_inff());
            for (int64_t i = 0; i < ld; i += simd::kLanes) {
                const V x = simd::load_as<V>(row + i);
                m = simd::max_lanes(x, m);
            }
            float lanes[simd::kLanes];
            simd::store(lanes, m);
            for (int w = simd::kLanes / 2; w >= 1; w /= 2)
                for (int i = 0; i < w; ++i) lanes[i] = lanes[i + w] > lanes[i] ? lanes[i + w] : lanes[i];
            const V mx = simd::splat_as<V>(lanes[0]);
            V sum = simd::zero_as<V>();
            for (int64_t i = 0; i < ld; i += simd::kLanes) {
                const V e = simd::exp(simd::load_as<V>(row + i) - mx);
                simd::store(row + i, e);
                sum += e;
            }
            const V inv = simd::splat_as<V>(1.0f / simd::hsum(sum));
            for (int64_t i = 0; i < ld; i += simd::kLanes) simd::store(row + i, simd::load_as<V>(row + i) * inv);
        }
    });
}

// Token i's out_j = sum_u p[i][j][u] v_u over its positions, each element from 0 in
// position order (p as scores() lays s out). Each cached row is converted once for all the
// tokens.
void weighted_sum(const float* p, int64_t ld, int64_t n_tok, int64_t n_heads, int64_t hdv, const Rows& v, int64_t n_pos0,
                  float* vbuf, float* out, int64_t out_tok, int64_t out_stride) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        const int64_t nv = hdv / simd::kLanes * simd::kLanes, n_pos = n_pos0 + n_tok - 1;
        for (int64_t tk = 0; tk < n_tok; ++tk)
            for (int64_t j = 0; j < n_heads; ++j) std::fill(out + tk * out_tok + j * out_stride, out + tk * out_tok + j * out_stride + hdv, 0.0f);
        for (int64_t u0 = 0; u0 < n_pos; u0 += kChunk) {
            const int64_t n = std::min(kChunk, n_pos - u0);
            v.get(u0, n, vbuf, hdv);
            v.prefetch(u0 + kChunk, kChunk, n_pos);
            for (int64_t tk = 0; tk < n_tok; ++tk) {
                const int64_t nt = std::min(n, n_pos0 + tk - u0);  // this token's rows of the chunk
                for (int64_t j = 0; j < n_heads; ++j) {
                    float* o = out + tk * out_tok + j * out_stride;
                    const float* pj = p + (tk * n_heads + j) * ld + u0;
                    int64_t i = 0;
                    // Four vectors of the row at a time: four independent chains of adds (one chain
                    // alone waits on the add's latency at every position). Each element still sums
                    // its positions in order.
                    for (; i + 4 * simd::kLanes <= nv; i += 4 * simd::kLanes) {
                        V acc[4];
                        for (int c = 0; c < 4; ++c) acc[c] = simd::load_as<V>(o + i + c * simd::kLanes);
                        for (int64_t r = 0; r < nt; ++r) {
                            const V pr = simd::splat_as<V>(pj[r]);
                            const float* vr = vbuf + r * hdv + i;
                            for (int c = 0; c < 4; ++c) acc[c] += pr * simd::load_as<V>(vr + c * simd::kLanes);
                        }
                        for (int c = 0; c < 4; ++c) simd::store(o + i + c * simd::kLanes, acc[c]);
                    }
                    for (; i < nv; i += simd::kLanes) {
                        V acc = simd::load_as<V>(o + i);
                        for (int64_t r = 0; r < nt; ++r) acc += simd::splat_as<V>(pj[r]) * simd::load_as<V>(vbuf + r * hdv + i);
                        simd::store(o + i, acc);
                    }
                    for (int64_t i2 = nv; i2 < hdv; ++i2)
                        for (int64_t r = 0; r < nt; ++r) o[i2] += pj[r] * vbuf[r * hdv + i2];
                }
            }
        }
    });
}

Rows rows_of(const KvRows& kv, int64_t n) {
    const TypeInfo& ti = type_info(kv.type);
    STRATA_CHECK(n % ti.block_size == 0, "attend: head size {} is not a multiple of the {} block size {}", n, ti.name,
                 ti.block_size);
    const size_t size = row_bytes(kv.type, n);
    return {dequantizer(kv.type), n / ti.block_size, size, kv.stride == size, &kv};
}

}  // namespace

void attend_tokens(const float* q, int64_t q_tok, int64_t q_stride, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                   int64_t head_dim_v, float scale, const KvRows& k, const KvRows& v, int64_t n_pos0, float* out,
                   int64_t out_tok, int64_t out_stride) {
    if (n_pos0 <= 0 || n_heads <= 0 || n_tok <= 0) return;
    thread_local std::vector<float> s, kbuf, vbuf;  // grow-only: no allocation in steady state
    const int64_t n_pos = n_pos0 + n_tok - 1;
    const int64_t ld = (n_pos + simd::kLanes - 1) / simd::kLanes * simd::kLanes;
    if (s.size() < static_cast<size_t>(n_tok * n_heads * ld)) s.resize(static_cast<size_t>(n_tok * n_heads * ld));
    if (kbuf.size() < static_cast<size_t>(kChunk * head_dim)) kbuf.resize(static_cast<size_t>(kChunk * head_dim));
    if (vbuf.size() < static_cast<size_t>(kChunk * head_dim_v)) vbuf.resize(static_cast<size_t>(kChunk * head_dim_v));
    const Rows kr = rows_of(k, head_dim), vr = rows_of(v, head_dim_v);
    kr.prefetch(0, kChunk, n_pos);
    scores(q, q_tok, q_stride, n_tok, n_heads, head_dim, scale, kr, vr, n_pos0, kbuf.data(), s.data(), ld);
    // A token's row past its own positions is -inf (softmax_rows fills it), so a wider ld
    // than its own adds only zeros: the same floats as the token alone.
    for (int64_t tk = 0; tk < n_tok; ++tk) softmax_rows(s.data() + tk * n_heads * ld, n_heads, ld, n_pos0 + tk);
    weighted_sum(s.data(), ld, n_tok, n_heads, head_dim_v, vr, n_pos0, vbuf.data(), out, out_tok, out_stride);
}

void attend(const float* q, int64_t q_stride, int64_t n_heads, int64_t head_dim, int64_t head_dim_v, float scale,
            const KvRows& k, const KvRows& v, int64_t n_pos, float* out, int64_t out_stride) {
    attend_tokens(q, 0, q_stride, 1, n_heads, head_dim, head_dim_v, scale, k, v, n_pos, out, 0, out_stride);
}

}  // namespace strata::ops
