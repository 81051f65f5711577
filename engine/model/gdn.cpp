#include "engine/model/gdn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/model/scratch_slots.h"
#include "kernels/cpu/gdn_step.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace strata {

// Scratch slots of this block (blocks.cpp uses 0-7, model.cpp / layers 14-17, moe 30+).
enum : int {
    kQkv = slot::kGdnQkv, kZ = slot::kGdnZ, kMixed = slot::kGdnMixed, kBa = slot::kGdnBa, kG = slot::kGdnG,
    kBeta = slot::kGdnBeta, kConvIn = slot::kGdnConvIn, kU = slot::kGdnU, kO = slot::kGdnO,
};

GdnDims GdnDims::from(const HParams& hp) {
    GdnDims d;
    d.nk = hp.ssm_n_group;
    d.nv = hp.ssm_dt_rank;
    d.dk = hp.ssm_d_state;
    d.dv = hp.ssm_d_inner / hp.ssm_dt_rank;
    d.conv_k = hp.ssm_conv_kernel;
    d.eps = hp.rms_eps;
    return d;
}

namespace {

// Legacy ssm_in output [T, per group: q dk | k dk | v r*dv | z r*dv] -> the current
// layout's conv input [T, q heads | k heads | v heads] and z [T, value heads].
void deinterleave(const GdnDims& d, const float* mixed, int64_t T, float* qkv, float* z) {
    const int64_t r = d.nv / d.nk, grp = 2 * d.dk + 2 * r * d.dv, n_in = d.nk * grp;
    for (int64_t t = 0; t < T; ++t) {
        const float* m = mixed + t * n_in;
        float* q = qkv + t * d.conv_dim();
        for (int64_t g = 0; g < d.nk; ++g) {
            const float* src = m + g * grp;
            std::memcpy(q + g * d.dk, src, sizeof(float) * d.dk);
            std::memcpy(q + d.key_dim() + g * d.dk, src + d.dk, sizeof(float) * d.dk);
            std::memcpy(q + 2 * d.key_dim() + g * r * d.dv, src + 2 * d.dk, sizeof(float) * r * d.dv);
            std::memcpy(z + t * d.value_dim() + g * r * d.dv, src + 2 * d.dk + r * d.dv, sizeof(float) * r * d.dv);
        }
    }
}

// x / max(||x||, eps), llama.cpp's ggml_l2_norm (HF uses x / sqrt(||x||^2 + 1e-6);
// the two differ only for near-zero vectors), then an optional extra scale.
void l2norm(float* x, int64_t n, float eps, float extra) {
    const float inv = 1.0f / std::max(std::sqrt(simd::dot(x, x, n)), eps);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * extra;
}

}  // namespace

void gdn_recurrent(ThreadPool& pool, const GdnDims& d, const float* u, const float* g, const float* beta,
                   int64_t T, float* state, float* o) {
    const int64_t r = d.nv / d.nk, cd = d.conv_dim(), dk = d.dk, dv = d.dv;
    pool.run(d.nv, [&](int64_t h) {
        const int64_t kh = h / r;  // grouped mapping (MODEL_SPEC 4.4, 8.1 item 5)
        float* M = state + h * dv * dk;
        for (int64_t t = 0; t < T; ++t) {
            const float* q = u + t * cd + kh * dk;
            const float* k = u + t * cd + d.key_dim() + kh * dk;
            const float* v = u + t * cd + 2 * d.key_dim() + h * dv;
            const float e = std::exp(g[t * d.nv + h]), b = beta[t * d.nv + h];
            float* out = o + t * d.value_dim() + h * dv;
            // decay -> m = S^T k -> delta -> S += k delta^T -> o = S^T q, row by row
            ops::gdn_step(M, dv, dk, q, k, v, e, b, out);
        }
    });
}

void gdn_chunked(ThreadPool& pool, const GdnDims& d, const float* u, const float* g, const float* beta,
                 int64_t T, float* state, float* o, int64_t chunk) {
    STRATA_CHECK(chunk > 0, "chunk size {}", chunk);
    const int64_t r = d.nv / d.nk, cd = d.conv_dim(), dk = d.dk, dv = d.dv, C = chunk;
    pool.run(d.nv, [&](int64_t h) {
        const int64_t kh = h / r;
        float* M = state + h * dv * dk;  // M[j][i] = S[i][j]
        thread_local std::vector<float> gam, L, P, U, W, acc;
        gam.resize(static_cast<size_t>(C));
        L.resize(static_cast<size_t>(C * C));
        P.resize(static_cast<size_t>(C * C));
        U.resize(static_cast<size_t>(C * dv));
        W.resize(static_cast<size_t>(C * dk));
        acc.resize(static_cast<size_t>(dk));
        auto Q = [&](int64_t t) { return u + t * cd + kh * dk; };
        auto K = [&](int64_t t) { return u + t * cd + d.key_dim() + kh * dk; };
        auto V = [&](int64_t t) { return u + t * cd + 2 * d.key_dim() + h * dv; };
        auto B = [&](int64_t t) { return beta[t * d.nv + h]; };
        for (int64_t t0 = 0; t0 < T; t0 += C) {
            const int64_t n = std::min(C, T - t0);  // a short last chunk = zero padding
            for (int64_t a = 0; a < n; ++a) gam[a] = (a ? gam[a - 1] : 0.0f) + g[(t0 + a) * d.nv + h];
            // L[a][s] = beta_a (k_a . k_s) exp(gam_a - gam_s), s < a; then in place the
            // strictly lower part R of T = (I + L)^-1 by forward substitution, row by row.
            for (int64_t a = 0; a < n; ++a)
                for (int64_t s = 0; s < a; ++s)
                    L[a * C + s] = B(t0 + a) * simd::dot(K(t0 + a), K(t0 + s), dk) * std::exp(gam[a] - gam[s]);
            for (int64_t a = 1; a < n; ++a)
                for (int64_t s = 0; s < a; ++s) {
                    float x = -L[a * C + s];
                    for (int64_t m = s + 1; m < a; ++m) x -= L[a * C + m] * L[m * C + s];  // L[m][s] already R
                    L[a * C + s] = x;
                }
            // U = T diag(beta) V, W = T diag(beta exp(gam)) K; then V' = U - W S (into U).
            for (int64_t a = 0; a < n; ++a) {
                float* ua = U.data() + a * dv;
                float* wa = W.data() + a * dk;
                const float ba = B(t0 + a), bea = ba * std::exp(gam[a]);
                for (int64_t j = 0; j < dv; ++j) ua[j] = ba * V(t0 + a)[j];
                for (int64_t i = 0; i < dk; ++i) wa[i] = bea * K(t0 + a)[i];
                for (int64_t s = 0; s < a; ++s) {
                    const float c = L[a * C + s], bs = B(t0 + s), bes = bs * std::exp(gam[s]);
                    for (int64_t j = 0; j < dv; ++j) ua[j] += c * bs * V(t0 + s)[j];
                    for (int64_t i = 0; i < dk; ++i) wa[i] += c * bes * K(t0 + s)[i];
                }
                for (int64_t j = 0; j < dv; ++j) ua[j] -= simd::dot(M + j * dk, wa, dk);
            }
            // O = diag(exp(gam)) Q S + P V', P[a][s] = (q_a . k_s) exp(gam_a - gam_s), s <= a.
            for (int64_t a = 0; a < n; ++a) {
                for (int64_t s = 0; s <= a; ++s)
                    P[a * C + s] = simd::dot(Q(t0 + a), K(t0 + s), dk) * std::exp(gam[a] - gam[s]);
                float* out = o + (t0 + a) * d.value_dim() + h * dv;
                const float ea = std::exp(gam[a]);
                for (int64_t j = 0; j < dv; ++j) {
                    float x = ea * simd::dot(M + j * dk, Q(t0 + a), dk);
                    for (int64_t s = 0; s <= a; ++s) x += P[a * C + s] * U[s * dv + j];
                    out[j] = x;
                }
            }
            // S <- exp(gam_last) S + K^T diag(exp(gam_last - gam)) V'.
            const float el = std::exp(gam[n - 1]);
            for (int64_t j = 0; j < dv; ++j) {
                float* row = M + j * dk;
                for (int64_t i = 0; i < dk; ++i) acc[i] = row[i] * el;
                for (int64_t s = 0; s < n; ++s) {
                    const float c = std::exp(gam[n - 1] - gam[s]) * U[s * dv + j];
                    const float* ks = K(t0 + s);
                    for (int64_t i = 0; i < dk; ++i) acc[i] += ks[i] * c;
                }
                std::memcpy(row, acc.data(), sizeof(float) * dk);
            }
        }
    });
}

void gdn_block(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, const Batch& batch, int64_t il,
               const float* h, float* out, GdnForm form) {
    const int64_t T = batch.n_rows;
    const int64_t n_embd = w.ba.n_in, cd = d.conv_dim(), vd = d.value_dim(), K = d.conv_k, nv = d.nv;
    const int64_t r = nv / d.nk;
    float* qkv = ctx.scratch.get(kQkv, static_cast<size_t>(T * cd));  // [T, conv_dim] pre-conv
    float* z = ctx.scratch.get(kZ, static_cast<size_t>(T * vd));      // [T, value_dim] output gate
    if (w.fused) {
        float* mixed = ctx.scratch.get(kMixed, static_cast<size_t>(T * w.in.n_out));
        matmul(ctx.pool, w.in, h, n_embd, T, mixed, w.in.n_out);
        deinterleave(d, mixed, T, qkv, z);
    } else {
        matmul(ctx.pool, w.qkv, h, n_embd, T, qkv, cd);
        matmul(ctx.pool, w.gate, h, n_embd, T, z, vd);
    }

    // Gates: ssm_ba is interleaved per key group [b(r) | a(r)] in both layouts.
    float* ba = ctx.scratch.get(kBa, static_cast<size_t>(T * 2 * nv));
    float* gl = ctx.scratch.get(kG, static_cast<size_t>(T * nv));    // [T, nv] log-decay, <= 0
    float* bt = ctx.scratch.get(kBeta, static_cast<size_t>(T * nv));  // [T, nv]
    matmul(ctx.pool, w.ba, h, n_embd, T, ba, 2 * nv);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t hh = 0; hh < nv; ++hh) {
            const int64_t g = hh / r, j = hh % r;
            bt[t * nv + hh] = ops::sigmoid(ba[t * 2 * nv + g * 2 * r + j]);
            gl[t * nv + hh] = w.a[hh] * ops::softplus(ba[t * 2 * nv + g * 2 * r + r + j] + w.dt_bias[hh]);
        }

    // Per sequence: causal depthwise conv over [history (K-1 rows) ; its rows], then
    // SiLU (the last tap meets the current token; the new history is the last K-1
    // rows), L2 norms, and the delta rule over its own state.
    float* u = ctx.scratch.get(kU, static_cast<size_t>(T * cd));
    float* o = ctx.scratch.get(kO, static_cast<size_t>(T * vd));  // [T, nv, dv]
    const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
    for (const BatchSeq& bs : batch.seqs) {
        const int64_t slot = bs.state->gdn_slot[static_cast<size_t>(il)];
        float* conv_state = bs.state->gdn->conv(slot);
        float* ssm_state = bs.state->gdn->ssm(slot);
        const int64_t n = bs.n;
        float* us = u + bs.row0 * cd;
        float* X = ctx.scratch.get(kConvIn, static_cast<size_t>((K - 1 + n) * cd));
        std::memcpy(X, conv_state, sizeof(float) * (K - 1) * cd);
        std::memcpy(X + (K - 1) * cd, qkv + bs.row0 * cd, sizeof(float) * n * cd);
        ctx.pool.parallel_for(cd, 64, [&](int64_t c0, int64_t c1) {
            for (int64_t t = 0; t < n; ++t)
                for (int64_t c = c0; c < c1; ++c) {
                    const float* wc = w.conv.data() + c * K;
                    float s = 0.0f;
                    for (int64_t j = 0; j < K; ++j) s += wc[j] * X[(t + j) * cd + c];
                    us[t * cd + c] = ops::silu(s);
                }
        });
        std::memcpy(conv_state, X + n * cd, sizeof(float) * (K - 1) * cd);

        for (int64_t t = 0; t < n; ++t)
            for (int64_t g = 0; g < d.nk; ++g) {
                l2norm(us + t * cd + g * d.dk, d.dk, d.eps, qscale);
                l2norm(us + t * cd + d.key_dim() + g * d.dk, d.dk, d.eps, 1.0f);
            }
        const float* gls = gl + bs.row0 * nv;
        const float* bts = bt + bs.row0 * nv;
        float* os = o + bs.row0 * vd;
        if (form == GdnForm::Chunked) gdn_chunked(ctx.pool, d, us, gls, bts, n, ssm_state, os);
        else gdn_recurrent(ctx.pool, d, us, gls, bts, n, ssm_state, os);
    }

    // Gated RMSNorm per value head: rmsnorm(o_h) * ssm_norm * silu(z_h).
    for (int64_t t = 0; t < T; ++t)
        for (int64_t hh = 0; hh < nv; ++hh) {
            float* oh = o + t * vd + hh * d.dv;
            const float* zh = z + t * vd + hh * d.dv;
            ops::rmsnorm(oh, w.norm.data(), d.eps, d.dv, oh);
            for (int64_t j = 0; j < d.dv; ++j) oh[j] *= ops::silu(zh[j]);
        }
    matmul(ctx.pool, w.out, o, vd, T, out, n_embd);
}

}  // namespace strata
