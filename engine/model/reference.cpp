#include "engine/model/reference.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"
#include "engine/model/hparams.h"
#include "engine/quant/quant.h"

namespace strata {
namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;  // rows

Mat load(const GgufFile& f, const std::string& name) {
    const GgufTensorInfo& t = f.tensor(name);
    const int64_t n = t.ne[0];
    const size_t rb = row_bytes(t.type, n);
    std::vector<float> row(static_cast<size_t>(n));
    Mat m;
    for (int64_t r = 0; r < t.n_rows(); ++r) {
        dequantize_row(t.type, t.data + static_cast<size_t>(r) * rb, row.data(), n);
        m.emplace_back(row.begin(), row.end());
    }
    return m;
}

Vec load_vec(const GgufFile& f, const std::string& name) {
    Mat m = load(f, name);
    Vec v;
    for (auto& r : m) v.insert(v.end(), r.begin(), r.end());
    return v;
}

Vec matvec(const Mat& w, const Vec& x) {
    Vec y(w.size());
    for (size_t o = 0; o < w.size(); ++o) {
        double s = 0;
        for (size_t i = 0; i < x.size(); ++i) s += w[o][i] * x[i];
        y[o] = s;
    }
    return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
    return y;
}

void rope(double* x, int64_t n_rot, bool neox, int64_t pos, double base, double freq_scale) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double theta = freq_scale * static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        double& a = neox ? x[i] : x[2 * i];
        double& b = neox ? x[i + n_rot / 2] : x[2 * i + 1];
        const double a0 = a, b0 = b;
        a = a0 * std::cos(theta) - b0 * std::sin(theta);
        b = a0 * std::sin(theta) + b0 * std::cos(theta);
    }
}

}  // namespace

std::vector<std::vector<double>> reference_forward(const GgufFile& f, const std::vector<int32_t>& tokens) {
    const HParams hp = HParams::from_gguf(f);
    if (hp.arch == Arch::Qwen3Next) fail("reference_forward: qwen3next is not covered yet");
    const int64_t T = static_cast<int64_t>(tokens.size()), hd = hp.head_dim;
    const Mat embd = load(f, "token_embd.weight");
    std::vector<Vec> x;
    for (int32_t id : tokens) x.push_back(embd.at(static_cast<size_t>(id)));

    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const Vec an = load_vec(f, p + "attn_norm.weight");
        const Mat wq = load(f, p + "attn_q.weight"), wk = load(f, p + "attn_k.weight"),
                  wv = load(f, p + "attn_v.weight"), wo = load(f, p + "attn_output.weight");
        Vec qn, kn;
        if (hp.arch == Arch::Qwen3) {
            qn = load_vec(f, p + "attn_q_norm.weight");
            kn = load_vec(f, p + "attn_k_norm.weight");
        }
        std::vector<Vec> Q(T), K(T), V(T);
        for (int64_t t = 0; t < T; ++t) {
            const Vec h = rmsnorm(x[t], an, hp.rms_eps);
            Q[t] = matvec(wq, h);
            K[t] = matvec(wk, h);
            V[t] = matvec(wv, h);
            auto head_prep = [&](Vec& v, int64_t nh, const Vec& norm) {
                for (int64_t j = 0; j < nh; ++j) {
                    double* hp0 = v.data() + j * hd;
                    if (!norm.empty()) {
                        Vec tmp(hp0, hp0 + hd);
                        tmp = rmsnorm(tmp, norm, hp.rms_eps);
                        std::copy(tmp.begin(), tmp.end(), hp0);
                    }
                    rope(hp0, hp.n_rot, hp.rope_neox, t, hp.rope_freq_base, hp.rope_freq_scale);
                }
            };
            head_prep(Q[t], hp.n_head, qn);
            head_prep(K[t], hp.n_head_kv, kn);
        }
        const int64_t group = hp.n_head / hp.n_head_kv;
        for (int64_t t = 0; t < T; ++t) {
            Vec o(static_cast<size_t>(hp.n_head * hp.head_dim_v), 0.0);
            for (int64_t j = 0; j < hp.n_head; ++j) {
                const int64_t g = j / group;
                Vec s(static_cast<size_t>(t + 1));
                double mx = -INFINITY;
                for (int64_t u = 0; u <= t; ++u) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; ++i) d += Q[t][j * hd + i] * K[u][g * hd + i];
                    s[u] = d / std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, s[u]);
                }
                double sum = 0;
                for (auto& v : s) sum += (v = std::exp(v - mx));
                for (int64_t u = 0; u <= t; ++u)
                    for (int64_t i = 0; i < hp.head_dim_v; ++i)
                        o[j * hp.head_dim_v + i] += s[u] / sum * V[u][g * hp.head_dim_v + i];
            }
            const Vec a = matvec(wo, o);
            for (int64_t i = 0; i < hp.n_embd; ++i) x[t][i] += a[i];
        }
        const Vec fn = load_vec(f, p + "ffn_norm.weight");
        const Mat wg = load(f, p + "ffn_gate.weight"), wu = load(f, p + "ffn_up.weight"),
                  wd = load(f, p + "ffn_down.weight");
        for (int64_t t = 0; t < T; ++t) {
            const Vec h = rmsnorm(x[t], fn, hp.rms_eps);
            Vec g = matvec(wg, h);
            const Vec u = matvec(wu, h);
            for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const Vec d = matvec(wd, g);
            for (int64_t i = 0; i < hp.n_embd; ++i) x[t][i] += d[i];
        }
    }
    const Vec on = load_vec(f, "output_norm.weight");
    const Mat out = load(f, f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight");
    std::vector<Vec> logits;
    for (int64_t t = 0; t < T; ++t) logits.push_back(matvec(out, rmsnorm(x[t], on, hp.rms_eps)));
    return logits;
}

}  // namespace strata
