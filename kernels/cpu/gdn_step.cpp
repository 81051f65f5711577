#include "kernels/cpu/gdn_step.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/simd.h"

// The clones must compute what the default one does: no a * b + c contracted into an FMA.
#pragma GCC optimize("fp-contract=off")

namespace strata::ops {
namespace {

using simd::vf;

// One row of the state through one token, in memory (any dk; the tail after the last
// whole vector in order, as simd::dot sums it). Returns out[j].
[[gnu::always_inline]] inline float row_step(float* row, int64_t dk, const float* q, const float* k, float vj, float e,
                                             float b) {
    const int64_t nv = dk / simd::kLanes * simd::kLanes;
    const vf ev = simd::splat(e);
    // row *= e and m = dot(row, k), as simd::dot sums: lanes, then the tail in order
    vf acc = simd::zero();
    for (int64_t i = 0; i < nv; i += simd::kLanes) {
        const vf r = simd::load(row + i) * ev;
        simd::store(row + i, r);
        acc += r * simd::load(k + i);
    }
    float m = simd::hsum(acc);
    for (int64_t i = nv; i < dk; ++i) {
        row[i] *= e;
        m += row[i] * k[i];
    }
    const float delta = b * (vj - m);
    // row += k * delta and out[j] = dot(row, q)
    const vf dl = simd::splat(delta);
    acc = simd::zero();
    for (int64_t i = 0; i < nv; i += simd::kLanes) {
        const vf r = simd::load(row + i) + simd::load(k + i) * dl;
        simd::store(row + i, r);
        acc += r * simd::load(q + i);
    }
    float o = simd::hsum(acc);
    for (int64_t i = nv; i < dk; ++i) {
        row[i] += k[i] * delta;
        o += row[i] * q[i];
    }
    return o;
}

// Tokens per run: their q and k (2 x 16 x dk floats) stay in L1 while every row of the
// state passes through them.
constexpr int64_t kRun = 16;

// dk = NV whole vectors: each row held in registers through a run of tokens, R rows at a
// time. A row's tokens are one chain of dependent steps (its dot with k, the sum, the
// update, the next token's dot), so one row at a time waited on that chain's latency;
// R rows side by side are R independent chains (and share the loads of k and q). Each
// row sees the same operations in the same order as alone.
template <int NV, int R>
[[gnu::always_inline]] inline void rows_in_registers(const float* M_in, float* M, int64_t dv, int64_t t0, int64_t n,
                                                     const float* q, const float* k, const float* v, int64_t ld,
                                                     const float* e, const float* b, float* out, int64_t ldo) {
    constexpr int64_t dk = NV * simd::kLanes;
    int64_t j = 0;
    auto rows = [&]<int NR>(int64_t j0) __attribute__((always_inline)) {
        // The next rows' state on its way meanwhile: a cold state (a layer's, between
        // windows) otherwise arrives only when the loop reaches it.
        if (NR > 1 && j0 + 2 * NR <= dv)
            for (int64_t o = 0; o < NR * dk; o += 16) __builtin_prefetch(M_in + (j0 + NR) * dk + o);
        vf r[NR][NV];
        for (int i = 0; i < NR; ++i)
            for (int c = 0; c < NV; ++c) r[i][c] = simd::load(M_in + (j0 + i) * dk + c * simd::kLanes);
        for (int64_t t = t0; t < t0 + n; ++t) {
            const float* kt = k + t * ld;
            const float* qt = q + t * ld;
            const vf ev = simd::splat(e[t]);
            vf acc[NR];
            for (int i = 0; i < NR; ++i) acc[i] = simd::zero();
            for (int c = 0; c < NV; ++c) {
                const vf kc = simd::load(kt + c * simd::kLanes);
                for (int i = 0; i < NR; ++i) {
                    r[i][c] = r[i][c] * ev;
                    acc[i] += r[i][c] * kc;
                }
            }
            vf dl[NR];
            for (int i = 0; i < NR; ++i) {
                dl[i] = simd::splat(b[t] * (v[t * ld + j0 + i] - simd::hsum(acc[i])));
                acc[i] = simd::zero();
            }
            for (int c = 0; c < NV; ++c) {
                const vf kc = simd::load(kt + c * simd::kLanes), qc = simd::load(qt + c * simd::kLanes);
                for (int i = 0; i < NR; ++i) {
                    r[i][c] = r[i][c] + kc * dl[i];
                    acc[i] += r[i][c] * qc;
                }
            }
            for (int i = 0; i < NR; ++i) out[t * ldo + j0 + i] = simd::hsum(acc[i]);
        }
        for (int i = 0; i < NR; ++i)
            for (int c = 0; c < NV; ++c) simd::store(M + (j0 + i) * dk + c * simd::kLanes, r[i][c]);
    };
    for (; j + R <= dv; j += R) rows.template operator()<R>(j);
    for (; j < dv; ++j) rows.template operator()<1>(j);
}

}  // namespace

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void gdn_step(float* M, int64_t dv, int64_t dk, const float* q, const float* k, const float* v, float e, float b,
              float* out) {
    for (int64_t j = 0; j < dv; ++j) out[j] = row_step(M + j * dk, dk, q, k, v[j], e, b);
}

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void gdn_steps(const float* M_in, float* M, int64_t dv, int64_t dk, int64_t T, const float* q, const float* k,
               const float* v, int64_t ld, const float* e, const float* b, float* out, int64_t ldo) {
    for (int64_t t0 = 0; t0 < T; t0 += kRun) {
        const int64_t n = std::min(kRun, T - t0);
        const float* src = t0 == 0 ? M_in : M;  // after the first run the state is in M
        // One token (decode): one row at a time. Side by side, a one-token run was 0.96x
        // with a cold state (a model's layer between two steps) and 1.1-1.5x with a warm
        // one (a micro-benchmark, docs/benchmarks.md); decode's states are cold.
        const bool one = n == 1;
        switch (dk) {
        case 2 * simd::kLanes:
            one ? rows_in_registers<2, 1>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo)
                : rows_in_registers<2, 8>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo);
            continue;
        case 4 * simd::kLanes:
            one ? rows_in_registers<4, 1>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo)
                : rows_in_registers<4, 4>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo);
            continue;
        case 8 * simd::kLanes:
            one ? rows_in_registers<8, 1>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo)
                : rows_in_registers<8, 4>(src, M, dv, t0, n, q, k, v, ld, e, b, out, ldo);
            continue;
        default: break;
        }
        for (int64_t j = 0; j < dv; ++j) {
            float* row = M + j * dk;
            if (src != M) std::memcpy(row, src + j * dk, sizeof(float) * static_cast<size_t>(dk));
            for (int64_t t = t0; t < t0 + n; ++t)
                out[t * ldo + j] = row_step(row, dk, q + t * ld, k + t * ld, v[t * ld + j], e[t], b[t]);
        }
    }
}

}  // namespace strata::ops
