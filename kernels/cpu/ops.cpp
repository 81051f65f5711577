#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/simd_forms.h"

// Every form of swiglu and conv_silu must compute what the SSE one does: no a * b + c
// contracted into an FMA (GCC does that by default where the target has FMA).
#pragma GCC optimize("fp-contract=off")

namespace strata::ops {

float dot(const float* a, const float* b, int64_t n) {
    float r;
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) { r = simd::dot_as<V>(a, b, n); });
    return r;
}

void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* y) {
    const float ss = dot(x, x, n);
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    if (w)
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void rope_angles(int64_t n_rot, int64_t pos, float freq_base, float freq_scale, const float* freq_factors, float* cs,
                 const RopeYarn& yarn) {
    if (yarn.ext_factor != 0.0f) {
        for (int64_t i = 0; i < n_rot / 2; ++i) {
            float extrap = static_cast<float>(pos) * std::pow(freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
            if (freq_factors) extrap /= freq_factors[i];
            const float interp = freq_scale * extrap;
            const float y = (static_cast<float>(i) - yarn.corr_low) / std::max(0.001f, yarn.corr_high - yarn.corr_low);
            const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * yarn.ext_factor;
            const float theta = interp * (1.0f - mix) + extrap * mix;
            cs[2 * i] = std::cos(theta) * yarn.mscale;
            cs[2 * i + 1] = std::sin(theta) * yarn.mscale;
        }
        return;
    }
    const int64_t half = n_rot / 2;
    // theta_i = pos * base^(-2i/n_rot), computed as ggml does by repeated multiplication
    // would drift; a direct pow per pair is exact enough and independent of the window.
    for (int64_t i = 0; i < half; ++i) {
        float theta = static_cast<float>(pos) * std::pow(freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
        theta *= freq_scale;
        if (freq_factors) theta /= freq_factors[i];
        cs[2 * i] = std::cos(theta);
        cs[2 * i + 1] = std::sin(theta);
    }
    if (yarn.mscale != 1.0f)
        for (int64_t i = 0; i < n_rot; ++i) cs[i] *= yarn.mscale;
}

void rope_apply(float* x, int64_t n_rot, bool neox, const float* cs) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        float* a = neox ? &x[i] : &x[2 * i];
        float* b = neox ? &x[i + half] : &x[2 * i + 1];
        const float x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

void rope(float* x, int64_t head_dim, int64_t n_rot, bool neox, int64_t pos, float freq_base, float freq_scale,
          const float* freq_factors) {
    (void)head_dim;
    float cs[512];
    if (n_rot <= 512) {
        rope_angles(n_rot, pos, freq_base, freq_scale, freq_factors, cs);
        rope_apply(x, n_rot, neox, cs);
        return;
    }
    std::vector<float> big(static_cast<size_t>(n_rot));
    rope_angles(n_rot, pos, freq_base, freq_scale, freq_factors, big.data());
    rope_apply(x, n_rot, neox, big.data());
}

void softmax(float* x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    float sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

namespace {
// silu(g) * u = g / (1 + e^-g) * u in 16 lanes with simd::exp: an element's result
// depends on its own g and u only (the tail goes through the same lanes), so any split
// of a row across threads gives the same bits.
template <class V>
[[gnu::always_inline]] inline V silu_mul(const V& g, const V& u) {
    return g / (simd::splat_as<V>(1.0f) + simd::exp(-g)) * u;
}
}  // namespace

void swiglu(const float* g, const float* u, int64_t n, float* y) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        int64_t i = 0;
        for (; i + simd::kLanes <= n; i += simd::kLanes)
            simd::store(y + i, silu_mul(simd::load_as<V>(g + i), simd::load_as<V>(u + i)));
        if (i < n) {
            float a[simd::kLanes] = {}, b[simd::kLanes] = {}, c[simd::kLanes];
            std::copy(g + i, g + n, a);
            std::copy(u + i, u + n, b);
            simd::store(c, silu_mul(simd::load_as<V>(a), simd::load_as<V>(b)));
            std::copy(c, c + (n - i), y + i);
        }
    });
}

void sigmoid_mul(float* o, const float* g, int64_t n) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        const V one = simd::splat_as<V>(1.0f);
        int64_t i = 0;
        for (; i + simd::kLanes <= n; i += simd::kLanes)
            simd::store(o + i, simd::load_as<V>(o + i) * (one / (one + simd::exp(-simd::load_as<V>(g + i)))));
        if (i < n) {
            float a[simd::kLanes] = {}, b[simd::kLanes] = {}, c[simd::kLanes];
            std::copy(o + i, o + n, a);
            std::copy(g + i, g + n, b);
            simd::store(c, simd::load_as<V>(a) * (one / (one + simd::exp(-simd::load_as<V>(b)))));
            std::copy(c, c + (n - i), o + i);
        }
    });
}

namespace {
// Tap J of sixteen channels from their four-tap weights a[0..3] (channels 4i .. 4i + 3 in
// a[i], taps side by side): two shuffles gather eight channels each, a third joins them.
template <int J>
[[gnu::always_inline]] inline simd::vf tap_of_4(const simd::vf* a) {
    const simd::vf lo = __builtin_shufflevector(a[0], a[1], J, 4 + J, 8 + J, 12 + J, 16 + J, 20 + J, 24 + J, 28 + J, J, J, J, J, J, J, J, J);
    const simd::vf hi = __builtin_shufflevector(a[2], a[3], J, 4 + J, 8 + J, 12 + J, 16 + J, 20 + J, 24 + J, 28 + J, J, J, J, J, J, J, J, J);
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
}
// The same from 256-bit pieces (two channels' taps in each): lanes 0-7 from a[0] and a[1],
// 8-15 from a[2] and a[3].
template <int J>
[[gnu::always_inline]] inline simd::Wide<simd::vf8> tap_of_4(const simd::Wide<simd::vf8>* a) {
    simd::Wide<simd::vf8> r;
    for (int h = 0; h < 2; ++h) {
        const simd::vf4 lo = __builtin_shufflevector(a[2 * h].p[0], a[2 * h].p[1], J, 4 + J, 8 + J, 12 + J);
        const simd::vf4 hi = __builtin_shufflevector(a[2 * h + 1].p[0], a[2 * h + 1].p[1], J, 4 + J, 8 + J, 12 + J);
        r.p[h] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
    }
    return r;
}
// And from 128-bit pieces (one channel's taps in each): a 4 x 4 transpose per a[i].
template <int J>
[[gnu::always_inline]] inline simd::Wide<simd::vf4> tap_of_4(const simd::Wide<simd::vf4>* a) {
    typedef float vf2 __attribute__((vector_size(2 * sizeof(float))));
    simd::Wide<simd::vf4> r;
    for (int i = 0; i < 4; ++i) {
        const vf2 lo = __builtin_shufflevector(a[i].p[0], a[i].p[1], J, 4 + J);
        const vf2 hi = __builtin_shufflevector(a[i].p[2], a[i].p[3], J, 4 + J);
        r.p[i] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3);
    }
    return r;
}
}  // namespace

void conv_silu(const float* X, int64_t cd, int64_t K, const float* w, int64_t c0, int64_t c1, float* y) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        constexpr int kL = simd::kLanes;
        int64_t c = c0;
        if (K == 4)  // the hybrid models' conv: sixteen channels' 64 weights in four loads
            for (; c + kL <= c1; c += kL) {
                V a[4];
                for (int i = 0; i < 4; ++i) a[i] = simd::load_as<V>(w + (c + 4 * i) * 4);
                V s = simd::zero_as<V>();
                s += tap_of_4<0>(a) * simd::load_as<V>(X + c);
                s += tap_of_4<1>(a) * simd::load_as<V>(X + cd + c);
                s += tap_of_4<2>(a) * simd::load_as<V>(X + 2 * cd + c);
                s += tap_of_4<3>(a) * simd::load_as<V>(X + 3 * cd + c);
                simd::store(y + c, s / (simd::splat_as<V>(1.0f) + simd::exp(-s)));
            }
        // Other widths and the last channels: the same operations per lane, the taps
        // gathered one by one (a tail's missing channels get zeros and are not stored).
        alignas(64) float wt[kL], xt[kL];
        for (; c < c1; c += kL) {
            const int64_t m = std::min<int64_t>(kL, c1 - c);
            V s = simd::zero_as<V>();
            for (int64_t j = 0; j < K; ++j) {
                for (int64_t l = 0; l < kL; ++l) {
                    wt[l] = l < m ? w[(c + l) * K + j] : 0.0f;
                    xt[l] = l < m ? X[j * cd + c + l] : 0.0f;
                }
                s += simd::load_as<V>(wt) * simd::load_as<V>(xt);
            }
            simd::store(xt, s / (simd::splat_as<V>(1.0f) + simd::exp(-s)));
            std::copy(xt, xt + m, y + c);
        }
    });
}

void add(float* y, const float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace strata::ops
