// Fixed-width float vectors for CPU kernels. Every kernel accumulates in vectors of
// exactly kLanes floats and reduces them in one fixed order, whatever the ISA: on
// AVX-512 a vector is one register, on AVX2 two, on SSE four, and each lane sees the
// same operations in the same order. That keeps results bit-identical across batch
// sizes, thread counts and instruction sets (no FMA contraction: -ffp-contract=off is
// the default for ISO C++).
#pragma once
#include <cstdint>
#include <cstring>

namespace strata::simd {

inline constexpr int kLanes = 16;
typedef float vf __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
[[gnu::always_inline]] inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
[[gnu::always_inline]] inline vf zero() { return vf{}; }
[[gnu::always_inline]] inline vf splat(float x) { return vf{} + x; }

// Pairwise tree reduction: the order is fixed by the code, not by the compiler.
//   a[i] += a[i + 8] (i < 8); a[i] += a[i + 4] (i < 4); a[i] += a[i + 2] (i < 2); a[0] + a[1]
// in halves of the vector, so it stays in registers (a spill to memory and fifteen scalar
// adds was most of a short dot product's time).
static_assert(kLanes == 16, "hsum below is written for 16 lanes");
typedef float vf8 __attribute__((vector_size(8 * sizeof(float))));
typedef float vf4 __attribute__((vector_size(4 * sizeof(float))));
[[gnu::always_inline]] inline float hsum(vf v) {
    const vf8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const vf4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
    return (b[0] + b[2]) + (b[1] + b[3]);
}

// dot(a, b) over n values: lanes over the multiple-of-kLanes part, then a scalar tail
// added in index order. The result depends only on (a, b, n).
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
    vf acc = zero();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) acc += load(a + i) * load(b + i);
    float s = hsum(acc);
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

}  // namespace strata::simd
