// Plain references of the op set (engine/backend/ops.h) for the every-op harness
// (tests/test_ops.cpp): each written as the op's definition reads, in double precision,
// with no blocking, threads or SIMD, on host memory. Weights go through dequantize_row,
// a KV cache's rows (copied back to the host: KvHost) are read back the same way.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/quant/quant.h"
#include "engine/state/seq_state.h"

namespace strata::ref {

using Vec = std::vector<double>;

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

inline Vec dequant(const MatView& w, int64_t r) {
    std::vector<float> f(static_cast<size_t>(w.n_in));
    dequantize_row(w.type, w.row(r), f.data(), w.n_in);
    return Vec(f.begin(), f.end());
}

inline Vec rms_norm(const float* x, int64_t n, const float* w, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    const double s = 1.0 / std::sqrt(ss / double(n) + eps);
    Vec y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * (w ? double(w[i]) : 1.0);
    return y;
}

// y [T, n_out] = x [T, n_in] W^T; abs (when set) receives sum_i |w_i x_i| per output, the
// scale an integer path's quantization error is bounded by.
inline Vec matmul(const MatView& w, const float* x, int64_t T, Vec* abs = nullptr) {
    Vec y(static_cast<size_t>(T * w.n_out));
    if (abs) abs->assign(y.size(), 0.0);
    for (int64_t o = 0; o < w.n_out; ++o) {
        const Vec row = dequant(w, o);
        for (int64_t t = 0; t < T; ++t) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < w.n_in; ++i) {
                s += row[i] * x[t * w.n_in + i];
                m += std::fabs(row[i] * x[t * w.n_in + i]);
            }
            y[t * w.n_out + o] = s;
            if (abs) (*abs)[t * w.n_out + o] = m;
        }
    }
    return y;
}

// One head rotated at position pos (n_rot dims; neox pairs or adjacent pairs).
// factors: n_rot / 2 divisors of the angles (a file's rope_freqs), or null. YaRN (ext
// != 0): the interpolated (scale *) and extrapolated angles mixed by a ramp over the
// correction dims [lo, hi]; cos and sin scaled by ms.
inline void rope(double* x, int64_t n_rot, bool neox, int64_t pos, double base, double scale,
                 const float* factors = nullptr, double ext = 0, double lo = 0, double hi = 0, double ms = 1) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        double ex = double(pos) * std::pow(base, -2.0 * double(i) / double(n_rot));
        if (factors) ex /= factors[i];
        const double mix = (1.0 - std::min(1.0, std::max(0.0, (double(i) - lo) / std::max(0.001, hi - lo)))) * ext;
        const double th = scale * ex * (1.0 - mix) + ex * mix;
        double* a = neox ? &x[i] : &x[2 * i];
        double* b = neox ? &x[i + half] : &x[2 * i + 1];
        const double x0 = *a, x1 = *b;
        *a = ms * (x0 * std::cos(th) - x1 * std::sin(th));
        *b = ms * (x0 * std::sin(th) + x1 * std::cos(th));
    }
}

// One layer of a KV cache copied back to the host (the cache is memory of the backend's
// device): KV head h's position u at k.data() + (h * n_ctx + u) * k_stride (v likewise),
// the cache's own rows, byte for byte.
struct KvHost {
    GgmlType type = GgmlType::F32;
    int64_t n_ctx = 0;
    size_t k_stride = 0, v_stride = 0;
    std::vector<uint8_t> k, v;
    const uint8_t* k_head(int64_t h) const { return k.data() + static_cast<size_t>(h * n_ctx) * k_stride; }
    const uint8_t* v_head(int64_t h) const { return v.data() + static_cast<size_t>(h * n_ctx) * v_stride; }
};

// Attention of one query head against positions [0, n_pos) of KV head kvh of a layer.
inline Vec attend(const float* q, int64_t hd, int64_t hdv, const KvHost& kv, int64_t kvh, int64_t n_pos) {
    std::vector<float> k(static_cast<size_t>(hd)), v(static_cast<size_t>(hdv));
    Vec s(static_cast<size_t>(n_pos)), o(static_cast<size_t>(hdv), 0.0);
    double mx = -1e300;
    for (int64_t u = 0; u < n_pos; ++u) {
        dequantize_row(kv.type, kv.k_head(kvh) + u * kv.k_stride, k.data(), hd);
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) d += double(q[i]) * k[i];
        s[u] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[u]);
    }
    double sum = 0;
    for (double& e : s) sum += (e = std::exp(e - mx));
    for (int64_t u = 0; u < n_pos; ++u) {
        dequantize_row(kv.type, kv.v_head(kvh) + u * kv.v_stride, v.data(), hdv);
        for (int64_t i = 0; i < hdv; ++i) o[i] += s[u] / sum * v[i];
    }
    return o;
}

// The gated delta rule, token by token, in double: S <- e S + k (b (v - (e S)^T k))^T,
// o = S^T q, per value head (state [nv, dv, dk], S stored transposed).
inline void delta_rule(const GdnDims& d, const float* u, const float* g, const float* beta, int64_t T,
                       std::vector<double>& S, Vec& o) {
    const int64_t r = d.nv / d.nk, cd = d.conv_dim();
    o.assign(static_cast<size_t>(T * d.value_dim()), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < d.nv; ++h) {
            const int64_t kh = d.tiled ? h % d.nk : h / r;  // qwen35's tiled order, or grouped
            const float* q = u + t * cd + kh * d.dk;
            const float* k = u + t * cd + d.key_dim() + kh * d.dk;
            const float* v = u + t * cd + 2 * d.key_dim() + h * d.dv;
            const double e = std::exp(double(g[t * d.nv + h])), b = beta[t * d.nv + h];
            double* M = S.data() + h * d.dv * d.dk;
            for (int64_t j = 0; j < d.dv; ++j) {
                double* row = M + j * d.dk;
                double m = 0;
                for (int64_t i = 0; i < d.dk; ++i) m += (row[i] *= e) * k[i];
                const double delta = b * (v[j] - m);
                double out = 0;
                for (int64_t i = 0; i < d.dk; ++i) out += (row[i] += k[i] * delta) * q[i];
                o[t * d.value_dim() + h * d.dv + j] = out;
            }
        }
}

}  // namespace strata::ref
