#include "kernels/cpu/act_quant.h"

#include <cmath>
#include <immintrin.h>

// Both versions below must produce the same bytes: no contraction of a * b + c.
#pragma GCC optimize("fp-contract=off")
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*() (`__m512 __Y = __Y;`),
// which -Wmaybe-uninitialized reports at -O3 wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata {

void ActQ::reserve(int64_t n_in, int64_t n_tok) {
    n = n_in;
    nb = n_in / 32;
    T = n_tok;
    const size_t nq = static_cast<size_t>(n_in * n_tok), nd = static_cast<size_t>(nb * n_tok + kPad);
    if (q.size() < nq) q.resize(nq), r.resize(nq);
    if (d.size() < nd) d.resize(nd), s.resize(nd);
    if (c.size() < 8 * static_cast<size_t>(nb * n_tok)) c.resize(8 * static_cast<size_t>(nb * n_tok));
    if (h.size() < 2 * static_cast<size_t>(nb * n_tok)) h.resize(2 * static_cast<size_t>(nb * n_tok));
}

namespace {

// Round half to even by the 1.5 * 2^23 trick (|v| <= 2^22): no libm call, the same
// result as nearbyint in the default rounding mode.
inline int round_even(float v) { return static_cast<int>((v + 12582912.0f) - 12582912.0f); }

inline float clamp(float v, float lim) { return v > lim ? lim : (v < -lim ? -lim : v); }

// The per-block scale: amax over the block's values (a NaN never wins).
inline float block_step(float amax) { return amax / static_cast<float>(ActQ::kMaxQ); }

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void quantize_avx512(const float* x, int64_t t, int64_t b0,
                                                                                    int64_t b1, ActQ& a) {
    int8_t* q = a.q.data() + t * a.n;
    int8_t* r = a.r.data() + t * a.n;
    int32_t* c = a.c.data() + t * a.nb * 8;
    int32_t* hs = a.h.data() + t * a.nb * 2;
    const __m512 lim_q = _mm512_set1_ps(ActQ::kMaxQ), lim_r = _mm512_set1_ps(ActQ::kMaxR), magic = _mm512_set1_ps(12582912.0f);
    const __m512i gidx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    for (int64_t b = b0; b < b1; ++b) {
        const float* xb = x + 32 * b;
        __m512 xv[2] = {_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)};
        // amax with NaN lanes as 0: the scalar loop's "NaN never wins" (max is exact and
        // order-independent otherwise).
        __m512 m = _mm512_setzero_ps();
        for (const __m512 v : xv) {
            const __m512 av = _mm512_abs_ps(v);
            m = _mm512_max_ps(m, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(av, av, _CMP_ORD_Q), av));
        }
        const float step = block_step(_mm512_reduce_max_ps(m));
        const float id = step > 0.0f ? 1.0f / step : 0.0f;
        __m512i x16[2];
        for (int h = 0; h < 2; ++h) {
            const __m512 v = _mm512_mul_ps(xv[h], _mm512_set1_ps(id));
            const __mmask16 ok = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
            // clamp: for non-NaN v the same value as the scalar clamp; NaN lanes become 0.
            const __m512 cq = _mm512_max_ps(_mm512_min_ps(v, lim_q), _mm512_sub_ps(_mm512_setzero_ps(), lim_q));
            const __m512 rq = _mm512_sub_ps(_mm512_add_ps(cq, magic), magic);
            const __m512i qi = _mm512_maskz_mov_epi32(ok, _mm512_cvttps_epi32(rq));
            const __m512 rem = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(qi)), _mm512_set1_ps(128.0f));
            const __mmask16 okr = _mm512_cmp_ps_mask(rem, rem, _CMP_ORD_Q);
            const __m512 cr = _mm512_max_ps(_mm512_min_ps(rem, lim_r), _mm512_sub_ps(_mm512_setzero_ps(), lim_r));
            const __m512i ri = _mm512_maskz_mov_epi32(okr, _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(cr, magic), magic)));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16 * h), _mm512_cvtepi32_epi8(qi));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(r + 32 * b + 16 * h), _mm512_cvtepi32_epi8(ri));
            x16[h] = _mm512_add_epi32(_mm512_slli_epi32(qi, 7), ri);
        }
        // Four-value group sums: each 128-bit lane holds one group.
        __m512i g[2];
        for (int h = 0; h < 2; ++h) {
            __m512i v = _mm512_add_epi32(x16[h], _mm512_shuffle_epi32(x16[h], _MM_PERM_CDAB));
            g[h] = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
        }
        const __m512i gs = _mm512_maskz_permutex2var_epi32(0xFF, g[0], gidx, g[1]);  // lanes 8..15: 0
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 8 * b),
                            _mm512_castsi512_si256(_mm512_sub_epi32(_mm512_setzero_si512(), gs)));
        hs[2 * b] = -_mm512_mask_reduce_add_epi32(0x0F, gs);
        hs[2 * b + 1] = -_mm512_mask_reduce_add_epi32(0xF0, gs);
        a.d[static_cast<size_t>(t * a.nb + b)] = step * (1.0f / 128.0f);
        a.s[static_cast<size_t>(t * a.nb + b)] = _mm512_reduce_add_epi32(gs);
    }
}

bool has_avx512() {
    static const bool ok = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }();
    return ok;
}
#endif

}  // namespace

namespace {

void quantize_scalar(const float* x, int64_t t, int64_t b0, int64_t b1, ActQ& a) {
    int8_t* q = a.q.data() + t * a.n;
    int8_t* r = a.r.data() + t * a.n;
    int32_t* c = a.c.data() + t * a.nb * 8;
    int32_t* hs = a.h.data() + t * a.nb * 2;
    for (int64_t b = b0; b < b1; ++b) {
        const float* xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) {
            const float v = std::fabs(xb[i]);
            amax = v > amax ? v : amax;  // NaN never wins
        }
        const float step = block_step(amax);
        const float id = step > 0.0f ? 1.0f / step : 0.0f;
        int32_t sum = 0;
        for (int l = 0; l < 8; ++l) {
            int32_t g = 0;
            for (int i = 4 * l; i < 4 * l + 4; ++i) {
                // The clamps keep rounding slop in range; a NaN input becomes 0.
                const float v = xb[i] * id;
                const int qi = v == v ? round_even(clamp(v, static_cast<float>(ActQ::kMaxQ))) : 0;
                const float rem = (v - static_cast<float>(qi)) * 128.0f;
                const int ri = rem == rem ? round_even(clamp(rem, static_cast<float>(ActQ::kMaxR))) : 0;
                q[32 * b + i] = static_cast<int8_t>(qi);
                r[32 * b + i] = static_cast<int8_t>(ri);
                g += 128 * qi + ri;
            }
            c[8 * b + l] = -g;
            sum += g;
        }
        hs[2 * b] = c[8 * b] + c[8 * b + 1] + c[8 * b + 2] + c[8 * b + 3];
        hs[2 * b + 1] = c[8 * b + 4] + c[8 * b + 5] + c[8 * b + 6] + c[8 * b + 7];
        a.d[static_cast<size_t>(t * a.nb + b)] = step * (1.0f / 128.0f);  // exact: a power of two
        a.s[static_cast<size_t>(t * a.nb + b)] = sum;
    }
}

}  // namespace

void quantize_act_token_scalar(const float* x, int64_t t, ActQ& a) { quantize_scalar(x, t, 0, a.nb, a); }

void quantize_act_blocks(const float* x, int64_t t, int64_t b0, int64_t b1, ActQ& a) {
#if defined(__x86_64__)
    if (has_avx512()) return quantize_avx512(x, t, b0, b1, a);
#endif
    quantize_scalar(x, t, b0, b1, a);
}

void quantize_act_token(const float* x, int64_t t, ActQ& a) { quantize_act_blocks(x, t, 0, a.nb, a); }

}  // namespace strata
