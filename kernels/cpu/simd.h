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

// hsum of eight vectors at once: out[j] = hsum(a[j]), the same additions in the same
// tree, with the halves of several vectors packed into one register at each step
// (about a third of the instructions of eight separate sums).
[[gnu::always_inline]] inline void hsum8(const vf* a, float* out) {
    // w = 8: b[p] = [a[2p] lanes i + i+8 | a[2p+1] lanes i + i+8], i < 8
    vf b[4];
    for (int p = 0; p < 4; ++p)
        b[p] = __builtin_shufflevector(a[2 * p], a[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(a[2 * p], a[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    // w = 4: c[p] = four lanes of each of a[4p .. 4p+3]
    vf c[2];
    for (int p = 0; p < 2; ++p)
        c[p] = __builtin_shufflevector(b[2 * p], b[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(b[2 * p], b[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    // w = 2: two lanes of each of a[0 .. 7]
    const vf d = __builtin_shufflevector(c[0], c[1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
                 __builtin_shufflevector(c[0], c[1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    // w = 1
    const vf8 e = __builtin_shufflevector(d, d, 0, 2, 4, 6, 8, 10, 12, 14) + __builtin_shufflevector(d, d, 1, 3, 5, 7, 9, 11, 13, 15);
    std::memcpy(out, &e, sizeof e);
}

// e^x lane by lane, the same bits on every instruction set (plain multiplies and adds in
// a fixed order; a caller compiled for FMA must keep fp-contract off, as the kernels do).
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, Cody and Waite), e^r from Cephes'
// polynomial (about 2 ulp), times 2^n built in the exponent bits. Lanes below
// -87.33 give 0 (no subnormals), above 88.72 give +inf, NaN stays NaN.
// For any GCC float vector F (vf, or the narrower pieces of simd_forms.h's Wide). A cast
// between GCC vectors of one size keeps the bits.
template <class F>
[[gnu::always_inline]] inline F exp_lanes(F x) {
    using I = decltype(x > x);  // the int32 vector of F's lanes
    const F hi = F{} + 88.72283935546875f, lo = F{} - 87.33654022216796875f;
    const I over = x > hi, under = x < lo;
    F xc = x;
    xc = over ? hi : xc;
    xc = under ? lo : xc;
    // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in the low mantissa bits
    const F magic = F{} + 12582912.0f;
    const F t = xc * 1.44269504088896341f + magic;
    const F n = t - magic;
    F r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const F r2 = r * r;
    F p = F{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    // 2^n as two factors 2^(n/2) and 2^(n - n/2), each a normal float for n in [-126, 128]
    const I ni = (I)t - 0x4B400000;  // t's bits minus magic's: n
    const I n1 = ni >> 1, n2 = ni - n1;
    const I b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
    F y = p * (F)b1 * (F)b2;
    y = over ? F{} + __builtin_inff() : y;
    y = under ? F{} : y;
    y = x != x ? x : y;  // NaN
    return y;
}
[[gnu::always_inline]] inline vf exp(vf x) { return exp_lanes(x); }


}  // namespace strata::simd
