#include "kernels/cpu/gdn_step.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/simd_forms.h"

// Every form must compute what the SSE one does: no a * b + c contracted into an FMA.
#pragma GCC optimize("fp-contract=off")

namespace strata::ops {
namespace {

// One row of the state through one token, in memory (any dk; the tail after the last
// whole vector in order, as simd::dot sums it). Returns out[j].
template <class V>
[[gnu::always_inline]] inline float row_step(float* row, int64_t dk, const float* q, const float* k, float vj, float e,
                                             float b) {
    const int64_t nv = dk / simd::kLanes * simd::kLanes;
    const V ev = simd::splat_as<V>(e);
    // row *= e and m = dot(row, k), as simd::dot sums: lanes, then the tail in order
    V acc = simd::zero_as<V>();
    for (int64_t i = 0; i < nv; i += simd::kLanes) {
        const V r = simd::load_as<V>(row + i) * ev;
        simd::store(row + i, r);
        acc += r * simd::load_as<V>(k + i);
    }
    float m = simd::hsum(acc);
    for (int64_t i = nv; i < dk; ++i) {
        row[i] *= e;
        m += row[i] * k[i];
    }
    const float delta = b * (vj - m);
    // row += k * delta and out[j] = dot(row, q)
    const V dl = simd::splat_as<V>(delta);
    acc = simd::zero_as<V>();
    for (int64_t i = 0; i < nv; i += simd::kLanes) {
        const V r = simd::load_as<V>(row + i) + simd::load_as<V>(k + i) * dl;
        simd::store(row + i, r);
        acc += r * simd::load_as<V>(q + i);
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

// One run of tokens [t0, t0 + n) over every row of a head's state: the state comes from
// src (M_in for the first run, M after it) and goes to M.
struct Run {
    const float* src;
    float* M;
    int64_t dv, t0, n;
    const float *q, *k, *v;
    int64_t ld;
    const float *e, *b;
    float* out;
    int64_t ldo;
    bool stream;  // write M past the caches (rows held in registers only)
};

// A run's tokens through rows j0 .. j0 + NR - 1 of dk = NV whole vectors, side by side. A
// row's tokens are one chain of dependent steps (its dot with k, the sum, the update, the
// next token's dot), so one row at a time waited on that chain's latency; NR rows side by
// side are NR independent chains (and share the loads of k and q). Each row sees the
// same operations in the same order as alone. The rows are held in registers through the
// run (kInCache false: read from src once, written to M once), or left in M, in L1
// through the run, and read and written at each use (kInCache: for a row of more
// registers than the form has; dk 128 is 16 of AVX2's 16, and the compiler's spills of
// them cost more). Accessing the register rows through lambdas kept GCC from holding
// Wide<vf8> rows in registers (1.5x slower at dk 32), hence the if constexpr at each use.
template <class V, int NV, int NR, bool kInCache>
[[gnu::always_inline]] inline void row_group(const Run& a, int64_t j0) {
    constexpr int64_t dk = NV * simd::kLanes;
    V r[kInCache ? 1 : NR][kInCache ? 1 : NV];
    float* m[NR];
    for (int i = 0; i < NR; ++i) m[i] = a.M + (j0 + i) * dk;
    if constexpr (kInCache) {
        if (a.src != a.M)
            for (int i = 0; i < NR; ++i) std::memcpy(m[i], a.src + (j0 + i) * dk, sizeof(float) * dk);
    } else {
        // The next rows' state on its way meanwhile: a cold state (a layer's, between
        // windows) otherwise arrives only when the loop reaches it.
        if (NR > 1 && j0 + 2 * NR <= a.dv)
            for (int64_t o = 0; o < NR * dk; o += 16) __builtin_prefetch(a.src + (j0 + NR) * dk + o);
        for (int i = 0; i < NR; ++i)
            for (int c = 0; c < NV; ++c) r[i][c] = simd::load_as<V>(a.src + (j0 + i) * dk + c * simd::kLanes);
    }
    for (int64_t t = a.t0; t < a.t0 + a.n; ++t) {
        const float* kt = a.k + t * a.ld;
        const float* qt = a.q + t * a.ld;
        const V ev = simd::splat_as<V>(a.e[t]);
        V acc[NR];
        for (int i = 0; i < NR; ++i) acc[i] = simd::zero_as<V>();
        for (int c = 0; c < NV; ++c) {
            const V kc = simd::load_as<V>(kt + c * simd::kLanes);
            for (int i = 0; i < NR; ++i) {
                if constexpr (kInCache) {
                    const V x = simd::load_as<V>(m[i] + c * simd::kLanes) * ev;
                    simd::store(m[i] + c * simd::kLanes, x);
                    acc[i] += x * kc;
                } else {
                    r[i][c] = r[i][c] * ev;
                    acc[i] += r[i][c] * kc;
                }
            }
        }
        V dl[NR];
        for (int i = 0; i < NR; ++i) {
            dl[i] = simd::splat_as<V>(a.b[t] * (a.v[t * a.ld + j0 + i] - simd::hsum(acc[i])));
            acc[i] = simd::zero_as<V>();
        }
        for (int c = 0; c < NV; ++c) {
            const V kc = simd::load_as<V>(kt + c * simd::kLanes), qc = simd::load_as<V>(qt + c * simd::kLanes);
            for (int i = 0; i < NR; ++i) {
                if constexpr (kInCache) {
                    const V x = simd::load_as<V>(m[i] + c * simd::kLanes) + kc * dl[i];
                    simd::store(m[i] + c * simd::kLanes, x);
                    acc[i] += x * qc;
                } else {
                    r[i][c] = r[i][c] + kc * dl[i];
                    acc[i] += r[i][c] * qc;
                }
            }
        }
        for (int i = 0; i < NR; ++i) a.out[t * a.ldo + j0 + i] = simd::hsum(acc[i]);
    }
    if constexpr (!kInCache) {
        if (a.stream)
            for (int i = 0; i < NR; ++i)
                for (int c = 0; c < NV; ++c) simd::stream(m[i] + c * simd::kLanes, r[i][c]);
        else
            for (int i = 0; i < NR; ++i)
                for (int c = 0; c < NV; ++c) simd::store(m[i] + c * simd::kLanes, r[i][c]);
    }
}

// Every row of the head, R at a time (the rest one by one).
template <class V, int NV, int R, bool kInCache>
[[gnu::always_inline]] inline void rows(const Run& a) {
    int64_t j = 0;
    for (; j + R <= a.dv; j += R) row_group<V, NV, R, kInCache>(a, j);
    for (; j < a.dv; ++j) row_group<V, NV, 1, kInCache>(a, j);
}
template <class V, int NV, int R>
[[gnu::always_inline]] inline void rows_in_registers(const Run& a) {
    rows<V, NV, R, false>(a);
}
template <class V, int NV, int R>
[[gnu::always_inline]] inline void rows_in_cache(const Run& a) {
    rows<V, NV, R, true>(a);
}

// dk = NV whole vectors in the form of V (a vf takes W registers: 1 of AVX-512's 32, 2 of
// AVX2's 16, 4 of SSE's 16). One token (decode) takes one row at a time: side by side,
// a one-token run was 0.96x with a cold state (a model's layer between two steps) and
// 1.1-1.5x with a warm one (a micro-benchmark, docs/benchmarks.md); decode's states are
// cold. With 16 registers a row of more than 4 of them runs faster from L1 than from
// the compiler's spills (AVX2, dk 64 and 128, runs of 4 tokens: 1.5x and 2.0x).
template <class V, int NV>
[[gnu::always_inline]] inline void rows_of(const Run& a) {
    constexpr int W = simd::registers_of<V>();
    const bool one = a.n == 1;
    if constexpr (W == 1)
        one ? rows_in_registers<V, NV, 1>(a) : rows_in_registers<V, NV, NV == 2 ? 8 : 4>(a);
    else if constexpr (NV * W <= 4)
        one ? rows_in_registers<V, NV, 1>(a) : rows_in_registers<V, NV, 2>(a);
    else
        one ? rows_in_cache<V, NV, 1>(a) : rows_in_cache<V, NV, 4>(a);
}

}  // namespace

void gdn_step(float* M, int64_t dv, int64_t dk, const float* q, const float* k, const float* v, float e, float b,
              float* out) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        for (int64_t j = 0; j < dv; ++j) out[j] = row_step<V>(M + j * dk, dk, q, k, v[j], e, b);
    });
}

void gdn_steps(const float* M_in, float* M, int64_t dv, int64_t dk, int64_t T, const float* q, const float* k,
               const float* v, int64_t ld, const float* e, const float* b, float* out, int64_t ldo) {
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        // A state read from one buffer and written to another (a verify window's, from the
        // snapshot that lends its buffer) is next read after the window's weights have gone
        // through the caches: its lines are written past them, without reading them first.
        const bool stream = M_in != M && T <= kRun && reinterpret_cast<uintptr_t>(M) % 64 == 0;
        for (int64_t t0 = 0; t0 < T; t0 += kRun) {
            const int64_t n = std::min(kRun, T - t0);
            const Run a{t0 == 0 ? M_in : M, M, dv, t0, n, q, k, v, ld, e, b, out, ldo, stream};
            switch (dk) {
            case 2 * simd::kLanes: rows_of<V, 2>(a); continue;
            case 4 * simd::kLanes: rows_of<V, 4>(a); continue;
            case 8 * simd::kLanes: rows_of<V, 8>(a); continue;
            default: break;
            }
            for (int64_t j = 0; j < dv; ++j) {
                float* row = M + j * dk;
                if (a.src != M) std::memcpy(row, a.src + j * dk, sizeof(float) * static_cast<size_t>(dk));
                for (int64_t t = t0; t < t0 + n; ++t)
                    out[t * ldo + j] = row_step<V>(row, dk, q + t * ld, k + t * ld, v[t * ld + j], e[t], b[t]);
            }
        }
        if (stream) simd::stream_fence();  // before the pool's run tells another thread it is done
    });
}

}  // namespace strata::ops
