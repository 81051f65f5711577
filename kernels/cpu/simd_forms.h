// A float kernel compiled once per vector width, with the same floats in each.
//
// simd::vf is a GCC vector of 16 floats. On AVX-512 it is one register; in code compiled
// for AVX2 or SSE (the kernels' target_clones copies before these forms, and every
// function built for the baseline) GCC gives it no machine mode and keeps every vf that
// lives across a loop iteration (an accumulator, a state row carried through tokens) on
// the stack, moved in 16-byte pieces through general registers: the AVX2 clone of the
// GDN recurrence ran 3-7x slower than the AVX-512 one on the same CPU, most of its
// instructions stack traffic.
//
// Wide<N> is the same 16 lanes as native vectors N side by side (vf8 on AVX2, vf4 on
// SSE); GCC keeps those in registers. A kernel is written once as a generic lambda over
// its vector type V (vf or Wide<N>) and run through simd::forms(), which compiles it for
// each width with that width's target and calls the one vector_bits() names. Each lane
// sees the same operations in the same order in every form, and the reductions (hsum)
// keep vf's tree, so the forms compute the same floats (tests/test_simd_forms.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/simd.h"

namespace strata::simd {

// The widest vectors this CPU runs (512, 256 or 128 bits), or the width forced by
// force_vector_bits (benchmarks measure what a CPU without AVX-512 gets; tests compare the
// forms). The 512-bit form needs x86-64-v4 (AVX-512 F/BW/CD/DQ/VL), the 256-bit one v3.
int vector_bits();
// 0 goes back to the CPU's widest; a width this CPU cannot run throws strata::Error.
void force_vector_bits(int bits);
// Whether this CPU runs the form of `bits`.
bool runs_vector_bits(int bits);

template <class N>
struct Wide {
    using Piece = N;
    static constexpr int kPieces = static_cast<int>(sizeof(vf) / sizeof(N));
    static constexpr int kPieceLanes = kLanes / kPieces;
    N p[kPieces];

#define STRATA_WIDE_OP(op)                                                                   \
    [[gnu::always_inline]] friend Wide operator op(Wide a, const Wide& b) {                 \
        for (int i = 0; i < kPieces; ++i) a.p[i] = a.p[i] op b.p[i];                         \
        return a;                                                                            \
    }                                                                                        \
    [[gnu::always_inline]] Wide& operator op##=(const Wide& b) {                             \
        for (int i = 0; i < kPieces; ++i) p[i] = p[i] op b.p[i];                             \
        return *this;                                                                        \
    }
    STRATA_WIDE_OP(+)
    STRATA_WIDE_OP(-)
    STRATA_WIDE_OP(*)
    STRATA_WIDE_OP(/)
#undef STRATA_WIDE_OP
    [[gnu::always_inline]] friend Wide operator-(Wide a) {
        for (int i = 0; i < kPieces; ++i) a.p[i] = -a.p[i];
        return a;
    }
};

template <class V>
inline constexpr bool is_wide = !std::is_same_v<V, vf>;
// Registers of one vector of V: 1 for vf (AVX-512), 2 for Wide<vf8>, 4 for Wide<vf4>.
template <class V>
constexpr int registers_of() {
    if constexpr (is_wide<V>) return V::kPieces;
    else return 1;
}

template <class V>
[[gnu::always_inline]] inline V load_as(const float* p) {
    if constexpr (!is_wide<V>) {
        return load(p);
    } else {
        V v;
        for (int i = 0; i < V::kPieces; ++i) std::memcpy(&v.p[i], p + i * V::kPieceLanes, sizeof v.p[i]);
        return v;
    }
}
template <class N>
[[gnu::always_inline]] inline void store(float* p, const Wide<N>& v) {
    for (int i = 0; i < Wide<N>::kPieces; ++i) std::memcpy(p + i * Wide<N>::kPieceLanes, &v.p[i], sizeof v.p[i]);
}
// A store that bypasses the caches (p aligned to the vector: 64 bytes for vf), for data
// no one reads soon; a caller fences (stream_fence) before another thread may read it.
// In asm: an intrinsic cannot be inlined into these target-less helpers, which take
// their form's target only once inlined into it (run_512 ...).
template <class V>
[[gnu::always_inline]] inline void stream(float* p, const V& v) {
    if constexpr (!is_wide<V>) {
        asm("vmovntps %1, %0" : "=m"(*reinterpret_cast<vf*>(p)) : "v"(v));
    } else {
        using P = typename V::Piece;
        for (int i = 0; i < V::kPieces; ++i) {
            if constexpr (V::kPieces == 2)
                asm("vmovntps %1, %0" : "=m"(*reinterpret_cast<P*>(p + i * V::kPieceLanes)) : "x"(v.p[i]));
            else
                asm("movntps %1, %0" : "=m"(*reinterpret_cast<P*>(p + i * V::kPieceLanes)) : "x"(v.p[i]));
        }
    }
}
inline void stream_fence() { asm volatile("sfence" ::: "memory"); }
template <class V>
[[gnu::always_inline]] inline V splat_as(float x) {
    if constexpr (!is_wide<V>) {
        return splat(x);
    } else {
        V v;
        for (int i = 0; i < V::kPieces; ++i) v.p[i] = typename V::Piece{} + x;
        return v;
    }
}
template <class V>
[[gnu::always_inline]] inline V zero_as() {
    return splat_as<V>(0.0f);
}

// vf's tree (simd.h): lanes i + i + 8, then i + i + 4, then (0 + 2) + (1 + 3).
template <class N>
[[gnu::always_inline]] inline float hsum(const Wide<N>& v) {
    vf4 b;
    if constexpr (Wide<N>::kPieces == 2) {  // vf8 pieces: lanes 0-7 and 8-15
        const vf8 a = v.p[0] + v.p[1];
        b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    } else {  // vf4 pieces: lanes 0-3, 4-7, 8-11, 12-15
        static_assert(Wide<N>::kPieces == 4);
        b = (v.p[0] + v.p[2]) + (v.p[1] + v.p[3]);
    }
    return (b[0] + b[2]) + (b[1] + b[3]);
}
// out[j] = hsum(a[j]) for eight vectors, the same tree: in 256-bit pieces packed as vf's
// hsum8 packs them (lanes of several vectors side by side at each step).
template <class N>
[[gnu::always_inline]] inline void hsum8(const Wide<N>* a, float* out) {
    if constexpr (Wide<N>::kPieces == 2) {
        vf8 h[8];  // lanes i + i + 8
        for (int j = 0; j < 8; ++j) h[j] = a[j].p[0] + a[j].p[1];
        vf8 b[4];  // i + i + 4: four lanes of h[2p], four of h[2p + 1]
        for (int p = 0; p < 4; ++p)
            b[p] = __builtin_shufflevector(h[2 * p], h[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
                   __builtin_shufflevector(h[2 * p], h[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15);
        vf8 c[2];  // 0 + 2 and 1 + 3: two lanes of each of h[4q .. 4q + 3]
        for (int q = 0; q < 2; ++q)
            c[q] = __builtin_shufflevector(b[2 * q], b[2 * q + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
                   __builtin_shufflevector(b[2 * q], b[2 * q + 1], 2, 3, 6, 7, 10, 11, 14, 15);
        const vf8 e = __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14) +
                      __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15);
        std::memcpy(out, &e, sizeof e);
    } else {
        for (int j = 0; j < 8; ++j) out[j] = hsum(a[j]);
    }
}

// Lane by lane max (x > m ? x : m, as vf's kernels write it).
template <class V>
[[gnu::always_inline]] inline V max_lanes(const V& x, const V& m) {
    if constexpr (!is_wide<V>) {
        return x > m ? x : m;
    } else {
        V r;
        for (int i = 0; i < V::kPieces; ++i) r.p[i] = x.p[i] > m.p[i] ? x.p[i] : m.p[i];
        return r;
    }
}

template <class N>
[[gnu::always_inline]] inline Wide<N> exp(const Wide<N>& x) {
    Wide<N> r;
    for (int i = 0; i < Wide<N>::kPieces; ++i) r.p[i] = exp_lanes(x.p[i]);
    return r;
}

// dot(a, b) over n values: lanes over the multiple-of-kLanes part, then a scalar tail
// added in index order. The result depends only on (a, b, n), in every form.
template <class V>
[[gnu::always_inline]] inline float dot_as(const float* a, const float* b, int64_t n) {
    V acc = zero_as<V>();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) acc += load_as<V>(a + i) * load_as<V>(b + i);
    float s = hsum(acc);
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// simd::dot: the canonical order the kernels' headers name (in vf, as the tests compute it).
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) { return dot_as<vf>(a, b, n); }

template <class V>
struct Form {};

// f(Form<V>{}) compiled for one width: the lambda (always_inline) is inlined here and takes
// this function's target. fp-contract stays off so that no form fuses a * b + c into an
// FMA the SSE form cannot have.
template <class F>
[[gnu::target("arch=x86-64-v4"), gnu::optimize("fp-contract=off")]] inline void run_512(const F& f) {
    f(Form<vf>{});
}
template <class F>
[[gnu::target("arch=x86-64-v3"), gnu::optimize("fp-contract=off")]] inline void run_256(const F& f) {
    f(Form<Wide<vf8>>{});
}
template <class F>
[[gnu::optimize("fp-contract=off")]] inline void run_128(const F& f) {
    f(Form<Wide<vf4>>{});
}

// Runs the kernel f, a generic lambda [&]<class V>(Form<V>) __attribute__((always_inline))
// { ... }, in the form of vector_bits().
template <class F>
[[gnu::always_inline]] inline void forms(const F& f) {
    switch (vector_bits()) {
    case 512: return run_512(f);
    case 256: return run_256(f);
    default: return run_128(f);
    }
}

}  // namespace strata::simd
