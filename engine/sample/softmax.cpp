#include "engine/sample/softmax.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace strata {

namespace {

// exp(z) = 2^n * e^r with n = nearest(z / ln 2) and r = z - n ln 2 in [-ln2/2, ln2/2],
// ln 2 split in two (Cody-Waite) so that n * kLn2Hi is exact for |n| < 2^9.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
// Below this e^z is under FLT_MIN (2^n would leave the normal range): 0.
constexpr float kMinArg = -87.33654f;
// The minimax polynomial of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2] (Cephes' expf).
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// The scalar form: the same operations as the SSE2 one, lane by lane. Rounding of z/ln2 to
// the nearest integer, ties to even, as cvtps2dq does in the default rounding mode.
float exp_one(float x, float mx, float inv_t) {
    const float z = (x - mx) * inv_t;
    if (!(z >= kMinArg)) return 0.0f;  // also -inf and NaN
    const float nf = __builtin_rintf(z * kLog2e);
    const auto n = static_cast<int32_t>(nf);
    const float r = (z - nf * kLn2Hi) - nf * kLn2Lo;
    float p = kP0;
    p = p * r + kP1;
    p = p * r + kP2;
    p = p * r + kP3;
    p = p * r + kP4;
    p = p * r + kP5;
    const float e = (p * (r * r) + r) + 1.0f;
    const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return e * scale;
}

}  // namespace

void exp_shifted(std::span<const float> x, float mx, float t, float* out) {
    const float inv_t = 1.0f / t;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128 vmx = _mm_set1_ps(mx), vt = _mm_set1_ps(inv_t), lo = _mm_set1_ps(kMinArg), one = _mm_set1_ps(1.0f);
    for (; i + 4 <= x.size(); i += 4) {
        const __m128 z = _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(x.data() + i), vmx), vt);
        const __m128 ok = _mm_cmpge_ps(z, lo);  // false for NaN
        const __m128i n = _mm_cvtps_epi32(_mm_mul_ps(z, _mm_set1_ps(kLog2e)));
        const __m128 nf = _mm_cvtepi32_ps(n);
        const __m128 r = _mm_sub_ps(_mm_sub_ps(z, _mm_mul_ps(nf, _mm_set1_ps(kLn2Hi))), _mm_mul_ps(nf, _mm_set1_ps(kLn2Lo)));
        __m128 p = _mm_set1_ps(kP0);
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP1));
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP2));
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP3));
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP4));
        p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP5));
        const __m128 e = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r), one);
        // Lanes out of range hold an n whose scale is garbage: masked to 0 below.
        const __m128 scale = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n, _mm_set1_epi32(127)), 23));
        _mm_storeu_ps(out + i, _mm_and_ps(_mm_mul_ps(e, scale), ok));
    }
#endif
    for (; i < x.size(); ++i) out[i] = exp_one(x[i], mx, inv_t);
}

void scale_to(std::span<const float> e, double inv, float* out) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128d s = _mm_set1_pd(inv);
    for (; i + 4 <= e.size(); i += 4) {
        const __m128 x = _mm_loadu_ps(e.data() + i);
        const __m128 lo = _mm_cvtpd_ps(_mm_mul_pd(_mm_cvtps_pd(x), s));
        const __m128 hi = _mm_cvtpd_ps(_mm_mul_pd(_mm_cvtps_pd(_mm_movehl_ps(x, x)), s));
        _mm_storeu_ps(out + i, _mm_movelh_ps(lo, hi));
    }
#endif
    for (; i < e.size(); ++i) out[i] = static_cast<float>(static_cast<double>(e[i]) * inv);
}

void zero_below(std::span<float> e, float floor) {
    size_t i = 0;
#if defined(__SSE2__)
    const __m128 f = _mm_set1_ps(floor);
    for (; i + 4 <= e.size(); i += 4) {
        const __m128 x = _mm_loadu_ps(e.data() + i);
        _mm_storeu_ps(e.data() + i, _mm_and_ps(x, _mm_cmpge_ps(x, f)));
    }
#endif
    for (; i < e.size(); ++i)
        if (!(e[i] >= floor)) e[i] = 0.0f;
}

double sum_at_least(std::span<const float> v, float at, size_t* count) {
    double s[4] = {0, 0, 0, 0};
    size_t n = 0, i = 0;
#if defined(__SSE2__)
    const __m128 f = _mm_set1_ps(at);
    __m128d a01 = _mm_setzero_pd(), a23 = _mm_setzero_pd();
    for (; i + 4 <= v.size(); i += 4) {
        const __m128 x = _mm_loadu_ps(v.data() + i);
        const __m128 in = _mm_cmpge_ps(x, f);
        const int bits = _mm_movemask_ps(in);
        if (bits == 0) continue;
        n += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(bits)));
        const __m128 y = _mm_and_ps(x, in);
        a01 = _mm_add_pd(a01, _mm_cvtps_pd(y));
        a23 = _mm_add_pd(a23, _mm_cvtps_pd(_mm_movehl_ps(y, y)));
    }
    _mm_storeu_pd(s, a01);
    _mm_storeu_pd(s + 2, a23);
#endif
    for (; i < v.size(); ++i)
        if (v[i] >= at) {
            s[i % 4] += static_cast<double>(v[i]);
            ++n;
        }
    *count = n;
    return (s[0] + s[1]) + (s[2] + s[3]);
}

double sum_fixed(std::span<const float> v) {
    double s[4] = {0, 0, 0, 0};
    size_t i = 0;
#if defined(__SSE2__)
    __m128d a01 = _mm_setzero_pd(), a23 = _mm_setzero_pd();
    for (; i + 4 <= v.size(); i += 4) {
        const __m128 x = _mm_loadu_ps(v.data() + i);
        a01 = _mm_add_pd(a01, _mm_cvtps_pd(x));
        a23 = _mm_add_pd(a23, _mm_cvtps_pd(_mm_movehl_ps(x, x)));
    }
    _mm_storeu_pd(s, a01);
    _mm_storeu_pd(s + 2, a23);
#endif
    for (; i < v.size(); ++i) s[i % 4] += static_cast<double>(v[i]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

}  // namespace strata
