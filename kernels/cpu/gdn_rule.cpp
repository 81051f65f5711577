// The gated delta rule over one sequence's prepared rows (MODEL_SPEC 4.5, 4.6):
// token by token, or in the chunked WY form.
#include "kernels/cpu/gdn_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/gdn_step.h"
#include "kernels/cpu/ops.h"

namespace strata::ops {

void gdn_recurrent(ThreadPool& pool, const GdnHeads& d, const float* u, const float* g, const float* beta, int64_t T,
                   float* state, float* o, const float* state_in) {
    const int64_t cd = d.conv_dim(), dk = d.dk, dv = d.dv;
    // Two tasks per head (each half of its rows: a row of the state meets only its own v
    // and out, so any split of the rows gives the same bits). ThreadPool::run gives each
    // thread the same tasks on every call, so a head's state (dv x dk floats, read and
    // written by every token) stays in that core's cache; claimed from one shared
    // counter, the states moved between the cores (plain decode 2-5% slower on 2 threads).
    // Half heads let a thread that finishes first take a smaller piece of the other's
    // share: the two cores of the VM of docs/benchmarks.md do not run at the same speed
    // (a thread's four heads of a 9-row window took 50-62 us alone, in turn on either
    // core, against 83-94 us for all eight on the pool), and the faster thread could not
    // take the last head, already begun. Eight heads, 9 rows, cold states: 96-110 -> 88-90
    // us; the MoE preset's K = 8 windows (STRATA_CPU_PROFILE, three alternated runs):
    // gdn_recurrent_from 83-99 -> 81-93 us.
    const int64_t split = dv >= 32 ? 2 : 1, rows = (dv + split - 1) / split;
    pool.run(d.nv * split, [&](int64_t task) {
        const int64_t h = task / split, j0 = task % split * rows, n = std::min(dv, j0 + rows) - j0;
        const int64_t kh = d.key_head(h);  // grouped or tiled (MODEL_SPEC 4.4, 8.1 item 5; docs/qwen35.md 2.3)
        float* M = state + h * dv * dk + j0 * dk;
        thread_local std::vector<float> eb;  // grow-only: e then b of every token
        if (eb.size() < static_cast<size_t>(2 * T)) eb.resize(static_cast<size_t>(2 * T));
        for (int64_t t = 0; t < T; ++t) {
            eb[static_cast<size_t>(t)] = std::exp(g[t * d.nv + h]);
            eb[static_cast<size_t>(T + t)] = beta[t * d.nv + h];
        }
        // decay -> m = S^T k -> delta -> S += k delta^T -> o = S^T q, row by row, token by token
        gdn_steps(state_in ? state_in + h * dv * dk + j0 * dk : M, M, n, dk, T, u + kh * dk, u + d.key_dim() + kh * dk,
                  u + 2 * d.key_dim() + h * dv + j0, cd, eb.data(), eb.data() + T, o + h * dv + j0, d.value_dim());
    });
}

void gdn_chunked(ThreadPool& pool, const GdnHeads& d, const float* u, const float* g, const float* beta, int64_t T,
                 float* state, float* o, int64_t chunk) {
    STRATA_CHECK(chunk > 0, "chunk size {}", chunk);
    const int64_t cd = d.conv_dim(), dk = d.dk, dv = d.dv, C = chunk;
    pool.run(d.nv, [&](int64_t h) {
        const int64_t kh = d.key_head(h);
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
                    L[a * C + s] = B(t0 + a) * ops::dot(K(t0 + a), K(t0 + s), dk) * std::exp(gam[a] - gam[s]);
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
                for (int64_t j = 0; j < dv; ++j) ua[j] -= ops::dot(M + j * dk, wa, dk);
            }
            // O = diag(exp(gam)) Q S + P V', P[a][s] = (q_a . k_s) exp(gam_a - gam_s), s <= a.
            for (int64_t a = 0; a < n; ++a) {
                for (int64_t s = 0; s <= a; ++s)
                    P[a * C + s] = ops::dot(Q(t0 + a), K(t0 + s), dk) * std::exp(gam[a] - gam[s]);
                float* out = o + (t0 + a) * d.value_dim() + h * dv;
                const float ea = std::exp(gam[a]);
                for (int64_t j = 0; j < dv; ++j) {
                    float x = ea * ops::dot(M + j * dk, Q(t0 + a), dk);
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

}  // namespace strata::ops
