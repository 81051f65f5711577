#include "engine/model/reference.h"

#include <algorithm>
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

// factors: the file's rope_freqs (empty: none), dividing each pair's angle; YaRN from hp.
void rope(double* x, const HParams& hp, bool neox, int64_t pos, const Vec& factors) {
    const int64_t n_rot = hp.n_rot;
    for (int64_t i = 0; i < n_rot / 2; ++i) {
        double extrap = static_cast<double>(pos) * std::pow(double(hp.rope_freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        if (!factors.empty()) extrap /= factors[static_cast<size_t>(i)];
        const double interp = double(hp.rope_freq_scale) * extrap;
        const double y = (double(i) - hp.rope_corr_low) / std::max(0.001, double(hp.rope_corr_high) - hp.rope_corr_low);
        const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * hp.rope_ext_factor;
        const double theta = interp * (1.0 - mix) + extrap * mix, ms = hp.rope_mscale;
        double& a = neox ? x[i] : x[2 * i];
        double& b = neox ? x[i + n_rot / 2] : x[2 * i + 1];
        const double a0 = a, b0 = b;
        a = ms * (a0 * std::cos(theta) - b0 * std::sin(theta));
        b = ms * (a0 * std::sin(theta) + b0 * std::cos(theta));
    }
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double softplus(double x) { return x > 20.0 ? x : std::log(1.0 + std::exp(x)); }

Vec rope_factors(const GgufFile& f) {
    return f.find_tensor("rope_freqs.weight") ? load_vec(f, "rope_freqs.weight") : Vec{};
}

Vec embed_row(const GgufFile& f, const std::string& name, int32_t id) {
    const GgufTensorInfo& t = f.tensor(name);
    std::vector<float> row(static_cast<size_t>(t.ne[0]));
    dequantize_row(t.type, t.data + static_cast<size_t>(id) * row_bytes(t.type, t.ne[0]), row.data(), t.ne[0]);
    return Vec(row.begin(), row.end());
}

// ---- qwen3next (MODEL_SPEC 4), written from the spec's formulas, in double ----

// Gated attention of layer prefix p over normed inputs h at positions 0..T-1 (4.7).
std::vector<Vec> q3n_attention(const GgufFile& f, const HParams& hp, const std::string& p, const std::vector<Vec>& h) {
    const Vec rf = rope_factors(f);
    const int64_t T = static_cast<int64_t>(h.size()), hd = hp.head_dim, hdv = hp.head_dim_v;
    const Mat wq = load(f, p + "attn_q.weight"), wk = load(f, p + "attn_k.weight"), wv = load(f, p + "attn_v.weight"),
              wo = load(f, p + "attn_output.weight");
    const Vec qn = load_vec(f, p + "attn_q_norm.weight"), kn = load_vec(f, p + "attn_k_norm.weight");
    std::vector<Vec> Q(T), G(T), K(T), V(T);
    for (int64_t t = 0; t < T; ++t) {
        const Vec qg = matvec(wq, h[t]);
        for (int64_t j = 0; j < hp.n_head; ++j) {  // per head [query | gate]
            Vec q(qg.begin() + j * 2 * hd, qg.begin() + j * 2 * hd + hd);
            q = rmsnorm(q, qn, hp.rms_eps);
            rope(q.data(), hp, true, t, rf);
            Q[t].insert(Q[t].end(), q.begin(), q.end());
            G[t].insert(G[t].end(), qg.begin() + j * 2 * hd + hd, qg.begin() + (j + 1) * 2 * hd);
        }
        const Vec k = matvec(wk, h[t]);
        for (int64_t j = 0; j < hp.n_head_kv; ++j) {
            Vec kh(k.begin() + j * hd, k.begin() + (j + 1) * hd);
            kh = rmsnorm(kh, kn, hp.rms_eps);
            rope(kh.data(), hp, true, t, rf);
            K[t].insert(K[t].end(), kh.begin(), kh.end());
        }
        V[t] = matvec(wv, h[t]);
    }
    std::vector<Vec> out(T);
    const int64_t group = hp.n_head / hp.n_head_kv;
    for (int64_t t = 0; t < T; ++t) {
        Vec o(static_cast<size_t>(hp.n_head * hdv), 0.0);
        for (int64_t j = 0; j < hp.n_head; ++j) {
            const int64_t g = j / group;
            Vec s(static_cast<size_t>(t + 1));
            double mx = -INFINITY, sum = 0;
            for (int64_t u = 0; u <= t; ++u) {
                double d = 0;
                for (int64_t i = 0; i < hd; ++i) d += Q[t][j * hd + i] * K[u][g * hd + i];
                mx = std::max(mx, s[u] = d / std::sqrt(static_cast<double>(hd)));
            }
            for (auto& v : s) sum += (v = std::exp(v - mx));
            for (int64_t u = 0; u <= t; ++u)
                for (int64_t i = 0; i < hdv; ++i) o[j * hdv + i] += s[u] / sum * V[u][g * hdv + i];
            for (int64_t i = 0; i < hdv; ++i) o[j * hdv + i] *= sigmoid(G[t][j * hd + i]);
        }
        out[t] = matvec(wo, o);
    }
    return out;
}

// Gated DeltaNet of layer prefix p (4.5): the plain recurrence from a zero state.
std::vector<Vec> q3n_gdn(const GgufFile& f, const HParams& hp, const std::string& p, const std::vector<Vec>& h) {
    const int64_t T = static_cast<int64_t>(h.size());
    const int64_t nk = hp.ssm_n_group, nv = hp.ssm_dt_rank, dk = hp.ssm_d_state, dv = hp.ssm_d_inner / nv;
    const int64_t r = nv / nk, kd = nk * dk, vd = nv * dv, cd = 2 * kd + vd, K = hp.ssm_conv_kernel;
    std::vector<Vec> qkv(T), z(T);
    if (f.find_tensor(p + "attn_qkv.weight")) {
        const Mat wqkv = load(f, p + "attn_qkv.weight"), wg = load(f, p + "attn_gate.weight");
        for (int64_t t = 0; t < T; ++t) qkv[t] = matvec(wqkv, h[t]), z[t] = matvec(wg, h[t]);
    } else {  // legacy ssm_in: per key group g [q_g | k_g | v_{g r..} | z_{g r..}] (4.4.1)
        const Mat win = load(f, p + "ssm_in.weight");
        const int64_t grp = 2 * dk + 2 * r * dv;
        for (int64_t t = 0; t < T; ++t) {
            const Vec m = matvec(win, h[t]);
            qkv[t].assign(static_cast<size_t>(cd), 0.0);
            z[t].assign(static_cast<size_t>(vd), 0.0);
            for (int64_t g = 0; g < nk; ++g)
                for (int64_t i = 0; i < dk; ++i) {
                    qkv[t][g * dk + i] = m[g * grp + i];
                    qkv[t][kd + g * dk + i] = m[g * grp + dk + i];
                }
            for (int64_t hh = 0; hh < nv; ++hh)
                for (int64_t i = 0; i < dv; ++i) {
                    const int64_t g = hh / r, j = hh % r;
                    qkv[t][2 * kd + hh * dv + i] = m[g * grp + 2 * dk + j * dv + i];
                    z[t][hh * dv + i] = m[g * grp + 2 * dk + r * dv + j * dv + i];
                }
        }
    }
    // qwen35 (docs/qwen35.md 2.3): separate b and a projections, and value head hh reads
    // key head hh mod nk; qwen3next: ssm_ba per key group [b(r) | a(r)], key head hh / r.
    const bool tiled = hp.arch == Arch::Qwen35 || hp.arch == Arch::Qwen35Moe;
    const Mat wba = tiled ? Mat{} : load(f, p + "ssm_ba.weight");
    const Mat wb = tiled ? load(f, p + "ssm_beta.weight") : Mat{}, wa = tiled ? load(f, p + "ssm_alpha.weight") : Mat{};
    const Mat conv = load(f, p + "ssm_conv1d.weight"), wout = load(f, p + "ssm_out.weight");
    const Vec dt = load_vec(f, p + "ssm_dt.bias"), A = load_vec(f, p + "ssm_a"), nw = load_vec(f, p + "ssm_norm.weight");
    std::vector<Mat> S(static_cast<size_t>(nv), Mat(static_cast<size_t>(dk), Vec(static_cast<size_t>(dv), 0.0)));
    std::vector<Vec> out(T);
    for (int64_t t = 0; t < T; ++t) {
        const Vec ba = tiled ? Vec{} : matvec(wba, h[t]);
        const Vec bl = tiled ? matvec(wb, h[t]) : Vec{}, al = tiled ? matvec(wa, h[t]) : Vec{};
        Vec u(static_cast<size_t>(cd));
        for (int64_t c = 0; c < cd; ++c) {
            double s = 0;
            for (int64_t j = 0; j < K; ++j) {
                const int64_t tau = t - (K - 1) + j;
                if (tau >= 0) s += conv[c][j] * qkv[tau][c];
            }
            u[c] = silu(s);
        }
        auto l2 = [&](double* x, double scale) {  // llama.cpp: x / max(||x||, eps)
            double ss = 0;
            for (int64_t i = 0; i < dk; ++i) ss += x[i] * x[i];
            const double d = std::max(std::sqrt(ss), static_cast<double>(hp.rms_eps));
            for (int64_t i = 0; i < dk; ++i) x[i] = x[i] / d * scale;
        };
        for (int64_t g = 0; g < nk; ++g) {
            l2(&u[g * dk], 1.0 / std::sqrt(static_cast<double>(dk)));
            l2(&u[kd + g * dk], 1.0);
        }
        Vec y(static_cast<size_t>(vd));
        for (int64_t hh = 0; hh < nv; ++hh) {
            const int64_t g = tiled ? hh % nk : hh / r, j = hh % r;
            const double beta = sigmoid(tiled ? bl[hh] : ba[g * 2 * r + j]);
            const double gate = A[hh] * softplus((tiled ? al[hh] : ba[g * 2 * r + r + j]) + dt[hh]);
            const double* q = &u[g * dk];
            const double* k = &u[kd + g * dk];
            const double* v = &u[2 * kd + hh * dv];
            Mat& s = S[hh];
            for (auto& row : s)
                for (double& e : row) e *= std::exp(gate);
            for (int64_t jv = 0; jv < dv; ++jv) {
                double m = 0;
                for (int64_t i = 0; i < dk; ++i) m += s[i][jv] * k[i];
                const double delta = beta * (v[jv] - m);
                for (int64_t i = 0; i < dk; ++i) s[i][jv] += k[i] * delta;
            }
            Vec o(static_cast<size_t>(dv), 0.0);
            for (int64_t jv = 0; jv < dv; ++jv)
                for (int64_t i = 0; i < dk; ++i) o[jv] += s[i][jv] * q[i];
            o = rmsnorm(o, nw, hp.rms_eps);
            for (int64_t jv = 0; jv < dv; ++jv) y[hh * dv + jv] = o[jv] * silu(z[t][hh * dv + jv]);
        }
        out[t] = matvec(wout, y);
    }
    return out;
}

// Sparse MoE with gated shared expert (4.8) on one normed vector.
struct RefMoe {
    Mat router, sh_gate, sh_up, sh_down;
    std::vector<Mat> gate, up, down;  // per expert
    Vec sh_inp;
};

RefMoe load_moe(const GgufFile& f, const HParams& hp, const std::string& p) {
    RefMoe m;
    m.router = load(f, p + "ffn_gate_inp.weight");
    auto split = [&](const Mat& all, int64_t rows) {  // 3-D stack -> per-expert matrices
        std::vector<Mat> out;
        for (size_t r = 0; r < all.size(); r += static_cast<size_t>(rows))
            out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(r), all.begin() + static_cast<std::ptrdiff_t>(r) + rows);
        return out;
    };
    const int64_t F = hp.n_ff_exp;
    if (f.find_tensor(p + "ffn_gate_up_exps.weight")) {
        for (const Mat& gu : split(load(f, p + "ffn_gate_up_exps.weight"), 2 * F)) {
            m.gate.emplace_back(gu.begin(), gu.begin() + F);
            m.up.emplace_back(gu.begin() + F, gu.end());
        }
    } else {
        m.gate = split(load(f, p + "ffn_gate_exps.weight"), F);
        m.up = split(load(f, p + "ffn_up_exps.weight"), F);
    }
    m.down = split(load(f, p + "ffn_down_exps.weight"), hp.n_embd);
    if (hp.n_ff_shexp == 0) return m;  // qwen3moe: no shared expert
    m.sh_inp = load_vec(f, p + "ffn_gate_inp_shexp.weight");
    m.sh_gate = load(f, p + "ffn_gate_shexp.weight");
    m.sh_up = load(f, p + "ffn_up_shexp.weight");
    m.sh_down = load(f, p + "ffn_down_shexp.weight");
    return m;
}

Vec swiglu_ffn(const Mat& g, const Mat& u, const Mat& d, const Vec& x) {
    Vec a = matvec(g, x);
    const Vec b = matvec(u, x);
    for (size_t i = 0; i < a.size(); ++i) a[i] = silu(a[i]) * b[i];
    return matvec(d, a);
}

// Routed experts, plus the gated shared expert when the layer has one.
Vec moe_ffn(const RefMoe& m, const HParams& hp, const Vec& x) {
    Vec p = matvec(m.router, x);
    const double mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (double& v : p) sum += (v = std::exp(v - mx));
    for (double& v : p) v /= sum;
    std::vector<int64_t> idx(p.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    double wsum = 0;
    for (int64_t s = 0; s < hp.n_expert_used; ++s) wsum += p[idx[s]];
    Vec y(x.size(), 0.0);
    for (int64_t s = 0; s < hp.n_expert_used; ++s) {
        const int64_t e = idx[s];
        const Vec o = swiglu_ffn(m.gate[e], m.up[e], m.down[e], x);
        for (size_t i = 0; i < y.size(); ++i) y[i] += p[e] / wsum * o[i];
    }
    if (m.sh_inp.empty()) return y;
    double sg = 0;
    for (size_t i = 0; i < x.size(); ++i) sg += m.sh_inp[i] * x[i];
    const Vec sh = swiglu_ffn(m.sh_gate, m.sh_up, m.sh_down, x);
    for (size_t i = 0; i < y.size(); ++i) y[i] += sigmoid(sg) * sh[i];
    return y;
}

// One qwen3next / qwen35 decoder layer (4.2) over the residual stream x, in place.
void q3n_layer(const GgufFile& f, const HParams& hp, int64_t il, bool recurrent, std::vector<Vec>& x) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const Vec an = load_vec(f, p + "attn_norm.weight"), pn = load_vec(f, p + "post_attention_norm.weight");
    std::vector<Vec> h;
    for (const Vec& v : x) h.push_back(rmsnorm(v, an, hp.rms_eps));
    const std::vector<Vec> m = recurrent ? q3n_gdn(f, hp, p, h) : q3n_attention(f, hp, p, h);
    const RefMoe moe = hp.moe() ? load_moe(f, hp, p) : RefMoe{};
    const Mat wg = hp.moe() ? Mat{} : load(f, p + "ffn_gate.weight"), wu = hp.moe() ? Mat{} : load(f, p + "ffn_up.weight"),
              wd = hp.moe() ? Mat{} : load(f, p + "ffn_down.weight");  // qwen35: dense FFN
    for (size_t t = 0; t < x.size(); ++t) {
        for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += m[t][i];
        const Vec hn = rmsnorm(x[t], pn, hp.rms_eps);
        const Vec y = hp.moe() ? moe_ffn(moe, hp, hn) : swiglu_ffn(wg, wu, wd, hn);
        for (size_t i = 0; i < x[t].size(); ++i) x[t][i] += y[i];
    }
}

std::vector<std::vector<double>> q3n_forward(const GgufFile& f, const HParams& hp, const std::vector<int32_t>& tokens) {
    std::vector<Vec> x;
    for (int32_t id : tokens) x.push_back(embed_row(f, "token_embd.weight", id));
    for (int64_t il = 0; il < hp.n_layer; ++il) q3n_layer(f, hp, il, hp.is_recurrent(il), x);
    const Vec on = load_vec(f, "output_norm.weight");
    const Mat out = load(f, f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight");
    std::vector<Vec> logits;
    for (const Vec& v : x) logits.push_back(matvec(out, rmsnorm(v, on, hp.rms_eps)));
    return logits;
}

}  // namespace

MtpReference reference_mtp(const GgufFile& f, const std::vector<std::vector<double>>& hidden,
                           const std::vector<int32_t>& next_tokens) {
    const HParams hp = HParams::from_gguf(f);
    if (hp.n_nextn < 1) fail("reference_mtp: {} has no MTP block", f.path());
    const std::string p = "blk." + std::to_string(hp.n_layer) + ".nextn.";
    const auto pick = [&](const std::string& own, const std::string& shared) { return f.find_tensor(own) ? own : shared; };
    const Vec en = load_vec(f, p + "enorm.weight"), hn = load_vec(f, p + "hnorm.weight");
    const Mat eh = load(f, p + "eh_proj.weight");
    std::vector<Vec> x;
    for (size_t t = 0; t < next_tokens.size(); ++t) {
        Vec c = rmsnorm(embed_row(f, pick(p + "embed_tokens.weight", "token_embd.weight"), next_tokens[t]), en, hp.rms_eps);
        const Vec b = rmsnorm(hidden[t], hn, hp.rms_eps);
        c.insert(c.end(), b.begin(), b.end());  // [embedding ; hidden] (4.11.2)
        x.push_back(matvec(eh, c));
    }
    q3n_layer(f, hp, hp.n_layer, false, x);
    const Vec norm = load_vec(f, pick(p + "shared_head_norm.weight", "output_norm.weight"));
    const Mat head = load(f, pick(p + "shared_head_head.weight", f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight"));
    MtpReference r;
    for (const Vec& v : x) {
        r.hidden.push_back(rmsnorm(v, norm, hp.rms_eps));
        r.logits.push_back(matvec(head, r.hidden.back()));
    }
    return r;
}

std::vector<std::vector<double>> reference_forward(const GgufFile& f, const std::vector<int32_t>& tokens) {
    const Vec rf = rope_factors(f);
    const HParams hp = HParams::from_gguf(f);
    if (hp.hybrid()) return q3n_forward(f, hp, tokens);
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
        if (hp.arch != Arch::Llama) {
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
                    rope(hp0, hp, hp.rope_neox, t, rf);
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
        if (hp.n_expert > 0) {  // qwen3moe
            const RefMoe moe = load_moe(f, hp, p);
            for (int64_t t = 0; t < T; ++t) {
                const Vec d = moe_ffn(moe, hp, rmsnorm(x[t], fn, hp.rms_eps));
                for (int64_t i = 0; i < hp.n_embd; ++i) x[t][i] += d[i];
            }
            continue;
        }
        const Mat wg = load(f, p + "ffn_gate.weight"), wu = load(f, p + "ffn_up.weight"),
                  wd = load(f, p + "ffn_down.weight");
        for (int64_t t = 0; t < T; ++t) {
            const Vec d = swiglu_ffn(wg, wu, wd, rmsnorm(x[t], fn, hp.rms_eps));
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
