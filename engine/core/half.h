// IEEE binary16 and bfloat16 conversions (exact, round-to-nearest-even on the way in).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

// Host and device: the GPU kernels (kernels/cuda) convert with these same functions.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif

namespace strata {

// memcpy for host and device code: hip-clang's device side has no std::memcpy (nvcc's and
// a CPU HIP runtime's have), its builtin does the same.
STRATA_HD inline void copy_bytes(void* dst, const void* src, std::size_t n) {
#if defined(__HIP_DEVICE_COMPILE__)
    __builtin_memcpy(dst, src, n);
#else
    std::memcpy(dst, src, n);
#endif
}

STRATA_HD inline float bits_to_f32(uint32_t u) { float f; copy_bytes(&f, &u, 4); return f; }
STRATA_HD inline uint32_t f32_to_bits(float f) { uint32_t u; copy_bytes(&u, &f, 4); return u; }

// fp16 -> f32, exact for every input including subnormals, inf and NaN.
STRATA_HD inline float fp16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) return bits_to_f32(sign | 0x7F800000u | (mant << 13));  // inf / NaN
    if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
    // zero or subnormal: mant * 2^-24, exact in f32
    return bits_to_f32(sign | f32_to_bits(static_cast<float>(mant) * 5.9604644775390625e-8f));
}

// f32 -> fp16 with round-to-nearest-even; overflow gives inf, NaN stays NaN.
STRATA_HD inline uint16_t f32_to_fp16(float f) {
    const uint32_t u = f32_to_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t absu = u & 0x7FFFFFFFu;
    if (absu > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);       // NaN
    if (absu >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);      // rounds to inf
    if (absu < 0x38800000u) {                                                    // subnormal or 0
        // add 0.5 (as a float) so the FPU rounds the mantissa to a multiple of 2^-24
        const float r = bits_to_f32(absu) + 0.5f;
        return static_cast<uint16_t>(sign | (f32_to_bits(r) - 0x3F000000u));
    }
    const uint32_t mant_odd = (absu >> 13) & 1u;
    const uint32_t v = absu + 0xC8000FFFu + mant_odd;  // rebias exponent (-112<<23) and round
    return static_cast<uint16_t>(sign | (v >> 13));
}

STRATA_HD inline float bf16_to_f32(uint16_t b) { return bits_to_f32(static_cast<uint32_t>(b) << 16); }

// f32 -> bf16 as ggml does it: round to nearest even; NaN becomes a quiet NaN.
STRATA_HD inline uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_to_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace strata
