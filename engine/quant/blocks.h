// Packed block structs of every supported ggml quantization format, byte-exact with
// ggml's src/ggml-common.h, plus the per-format row kernels that quant.cpp dispatches to.
// Internal to engine/quant; callers use quant.h.
//
// All structs are packed (alignment 1) so a block can be read at any byte offset of a
// mapped file. Multi-byte fields are little-endian; we rely on a little-endian host.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/core/half.h"

namespace strata {

static_assert(std::endian::native == std::endian::little,
              "quant blocks are read in place and assume a little-endian host");

inline constexpr int kQK = 32;    // block size of the legacy formats and IQ4_NL
inline constexpr int kQKK = 256;  // super-block size of the K-quants and IQ formats

// The value of largest magnitude in x[0..n), with its sign (0 when all are 0): the
// quantizers anchor their scale on it so that value maps to the codebook's end.
inline float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    return max;
}

#pragma pack(push, 1)

// Legacy 32-value blocks. Nibble layout (Q4_*, Q5_*, IQ4_NL): qs[j] holds value j in
// its low nibble and value j + 16 in its high nibble.
struct block_q4_0 { uint16_t d; uint8_t qs[16]; };                       // x = d*(q-8)
struct block_q4_1 { uint16_t d, m; uint8_t qs[16]; };                    // x = d*q + m
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };        // bit i of qh = 5th bit of value i
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct block_q8_0 { uint16_t d; int8_t qs[32]; };                        // x = d*q

// K-quants: 256 values per super-block.
// Q2_K: 16 sub-blocks of 16; scales[s] = 4-bit scale | 4-bit min << 4; qs[32h + l] holds
// 2-bit values of elements 128h + 32j + l at bits 2j (j = 0..3).
struct block_q2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
// Q3_K: 16 sub-blocks of 16 with 6-bit signed scales packed into 12 bytes; low 2 bits of
// the 3-bit value as in Q2_K, high bit of element 128h + 32j + l in hmask[l] bit 4h + j.
struct block_q3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
// Q4_K: 8 sub-blocks of 32 with 6-bit scale and min (12 packed bytes); chunk c of 64
// values uses qs[32c .. 32c+31], low nibbles = sub-block 2c, high nibbles = 2c + 1.
struct block_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
// Q5_K: Q4_K plus a 5th bit: element 64c + 32k + l has it at qh[l] bit 2c + k.
struct block_q5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
// Q6_K: 16 sub-blocks of 16 with int8 scales; 4 low bits in ql, 2 high bits in qh.
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
// Q8_K: activation helper; d is an f32, bsums[g] = sum of qs[16g .. 16g+15].
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

// IQ4_NL: Q4_0 nibble layout, values from the non-linear codebook kvalues_iq4nl.
struct block_iq4_nl { uint16_t d; uint8_t qs[16]; };
// IQ4_XS: 8 sub-blocks of 32; 6-bit scale of sub-block b = low nibble b of scales_l
// (two per byte) | 2 bits (scales_h >> 2b) << 4, biased by 32.
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
// IQ3_XXS: qs[0..63] = grid indices (4 values each), qs[64..95] = 8 LE uint32 words,
// one per 32 values: four 7-bit sign indices (bits 0..27) and a 4-bit scale (28..31).
struct block_iq3_xxs { uint16_t d; uint8_t qs[96]; };
// IQ3_S: qs[8b + k] = low 8 bits of the 9-bit grid index of 4-value group k of
// sub-block b, qh[b] bit k = its 9th bit; signs[4b + l] = 8 explicit signs of the
// 8-value group l; scales[b/2] nibble b%2 = 4-bit scale.
struct block_iq3_s { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
// IQ2_XXS: ggml declares uint16_t qs[32]; per 32 values 8 bytes: four grid indices (8
// values each) then a LE uint32 of four 7-bit sign indices and a 4-bit scale (as IQ3_XXS).
struct block_iq2_xxs { uint16_t d; uint8_t qs[64]; };
// IQ2_XS: qs[4b + l] = 9-bit grid index | 7-bit sign index << 9; scales[b] holds the
// 4-bit scales of the first (low nibble) and second (high nibble) 16 values of b.
struct block_iq2_xs { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
// IQ2_S: qs[0..31] = low 8 bits of the 10-bit grid indices, qs[32..63] = 8 explicit
// signs per group; qh[b] bits 2l..2l+1 = bits 8..9 of index 4b + l; scales as IQ2_XS.
struct block_iq2_s { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };
// IQ1_S: 8 blocks of 32, each four 8-value groups of ternary grid points (iq1s_grid,
// values -1, 0, 1). Group g of block b: 11-bit index qs[4b + g] | ((qh[b] >> 3g) & 7) << 8;
// qh[b] bits 12..14 = 3-bit scale s (dl = d * (2s + 1)), bit 15 = sign of the shift:
// x = dl * (grid + delta), delta = -1/8 when set, +1/8 otherwise.
struct block_iq1_s { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; };
// IQ1_M: the same grid, 16 halves of 16 values with their own 3-bit scales and a shift
// per 8 values. Group g (0..31): index qs[g] | ((qh[g / 2] >> 4(g % 2)) & 7) << 8, shift
// bit 3 + 4(g % 2) of qh[g / 2]. scales, read as four LE uint16 words sc[0..3]: half h has
// scale (sc[h / 4] >> 3(h % 4)) & 7; the fp16 super-scale d is bits 12..15 of sc[0..3]
// (sc[0] gives d's lowest nibble). No separate d field.
struct block_iq1_m { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };

#pragma pack(pop)

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144 && sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18 && sizeof(block_iq4_xs) == 136);
static_assert(sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110);
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74);
static_assert(sizeof(block_iq2_s) == 82);
static_assert(sizeof(block_iq1_s) == 50 && sizeof(block_iq1_m) == 56);

// IQ1_S / IQ1_M: the grid shift (ggml IQ1S_DELTA), and IQ1_M's fp16 super-scale from the
// top nibbles of its four scale words.
inline constexpr float kIq1Delta = 0.125f;
inline uint16_t iq1m_scale_bits(const block_iq1_m& x) {
    uint16_t sc[4];
    std::memcpy(sc, x.scales, 8);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// The non-linear 4-bit codebook of IQ4_NL / IQ4_XS (ggml kvalues_iq4nl).
inline constexpr int8_t kValuesIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Helpers shared by the quantizers.
inline float half_to_float(uint16_t h) { return fp16_to_f32(h); }

// Round to nearest and clamp to [lo, hi]; NaN maps to lo instead of hitting UB.
inline int round_clamp(float v, int lo, int hi) {
    if (!(v >= static_cast<float>(lo))) return lo;
    if (v >= static_cast<float>(hi)) return hi;
    return static_cast<int>(std::nearbyint(v));
}

// Flip the sign of v when bit is 1 (same result as v * -1.f, without a branch).
inline float apply_sign(float v, uint32_t bit) { return bits_to_f32(f32_to_bits(v) ^ (bit << 31)); }

namespace quant_detail {
// Row kernels: nb = number of blocks. Defined in quant_legacy.cpp, quant_kquants.cpp and
// quant_iq.cpp.
void dequant_f32(const void* src, float* dst, int64_t nb);
void dequant_f16(const void* src, float* dst, int64_t nb);
// dequant_f16 on the path that converts `width` values at a time (16: AVX-512, 8: F16C,
// 1: the table), at most dequant_f16_widest(), the one this CPU takes: the same bits on
// every path (tests run each).
int dequant_f16_widest();
void dequant_f16_width(int width, const void* src, float* dst, int64_t nb);
void dequant_bf16(const void* src, float* dst, int64_t nb);
void dequant_q4_0(const void* src, float* dst, int64_t nb);
void dequant_q4_1(const void* src, float* dst, int64_t nb);
void dequant_q5_0(const void* src, float* dst, int64_t nb);
void dequant_q5_1(const void* src, float* dst, int64_t nb);
void dequant_q8_0(const void* src, float* dst, int64_t nb);
void dequant_q2_K(const void* src, float* dst, int64_t nb);
void dequant_q3_K(const void* src, float* dst, int64_t nb);
void dequant_q4_K(const void* src, float* dst, int64_t nb);
void dequant_q5_K(const void* src, float* dst, int64_t nb);
void dequant_q6_K(const void* src, float* dst, int64_t nb);
void dequant_q8_K(const void* src, float* dst, int64_t nb);
void dequant_iq4_nl(const void* src, float* dst, int64_t nb);
void dequant_iq4_xs(const void* src, float* dst, int64_t nb);
void dequant_iq3_xxs(const void* src, float* dst, int64_t nb);
void dequant_iq3_s(const void* src, float* dst, int64_t nb);
void dequant_iq2_xxs(const void* src, float* dst, int64_t nb);
void dequant_iq2_xs(const void* src, float* dst, int64_t nb);
void dequant_iq2_s(const void* src, float* dst, int64_t nb);
void dequant_iq1_s(const void* src, float* dst, int64_t nb);
void dequant_iq1_m(const void* src, float* dst, int64_t nb);

void quant_f32(const float* src, void* dst, int64_t nb);
void quant_f16(const float* src, void* dst, int64_t nb);
void quant_bf16(const float* src, void* dst, int64_t nb);
void quant_q4_0(const float* src, void* dst, int64_t nb);
void quant_q4_1(const float* src, void* dst, int64_t nb);
void quant_q5_0(const float* src, void* dst, int64_t nb);
void quant_q5_1(const float* src, void* dst, int64_t nb);
void quant_q8_0(const float* src, void* dst, int64_t nb);
void quant_q2_K(const float* src, void* dst, int64_t nb);
void quant_q3_K(const float* src, void* dst, int64_t nb);
void quant_q4_K(const float* src, void* dst, int64_t nb);
void quant_q5_K(const float* src, void* dst, int64_t nb);
void quant_q6_K(const float* src, void* dst, int64_t nb);
void quant_q8_K(const float* src, void* dst, int64_t nb);
void quant_iq4_nl(const float* src, void* dst, int64_t nb);
void quant_iq4_xs(const float* src, void* dst, int64_t nb);
void quant_iq3_xxs(const float* src, void* dst, int64_t nb);
void quant_iq3_s(const float* src, void* dst, int64_t nb);
void quant_iq2_xxs(const float* src, void* dst, int64_t nb);
void quant_iq2_xs(const float* src, void* dst, int64_t nb);
void quant_iq2_s(const float* src, void* dst, int64_t nb);
void quant_iq1_s(const float* src, void* dst, int64_t nb);
void quant_iq1_m(const float* src, void* dst, int64_t nb);
}  // namespace quant_detail

}  // namespace strata
