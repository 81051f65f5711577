// Device-side dequantization of the GGML block formats: dequant32<T>(blk, j, out, tab)
// writes values [32j, 32j + 32) of the block at byte pointer blk; tab holds the IQ
// codebooks on the device (gpu.h, made by upload_iq_tables in iq_tables.cu). Results are
// bit-identical to the host dequantizers (engine/quant/quant_*.cpp): the same float
// expressions in the same order, and products that feed an add are rounded on their own
// (mul_rn), since nvcc and hipcc contract a*b+c into an fma and the host does not.
//
// Blocks sit at any byte offset (packed, alignment 1), so multi-byte fields are read
// byte-wise: a misaligned uint16_t/uint32_t load faults on a GPU.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/core/half.h"
#include "engine/quant/types.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

// Bytes and values of one block of T (engine/quant/types.cpp); 0 for formats without a
// dequant32.
constexpr int block_bytes(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: return 18;
        case GgmlType::Q4_1: return 20;
        case GgmlType::Q5_0: return 22;
        case GgmlType::Q5_1: return 24;
        case GgmlType::Q8_0: return 34;
        case GgmlType::Q2_K: return 84;
        case GgmlType::Q3_K: return 110;
        case GgmlType::Q4_K: return 144;
        case GgmlType::Q5_K: return 176;
        case GgmlType::Q6_K: return 210;
        case GgmlType::Q8_K: return 292;
        case GgmlType::IQ2_XXS: return 66;
        case GgmlType::IQ2_XS: return 74;
        case GgmlType::IQ3_XXS: return 98;
        case GgmlType::IQ1_S: return 50;
        case GgmlType::IQ4_NL: return 18;
        case GgmlType::IQ3_S: return 110;
        case GgmlType::IQ2_S: return 82;
        case GgmlType::IQ4_XS: return 136;
        case GgmlType::IQ1_M: return 56;
        default: return 0;
    }
}
constexpr int block_values(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
        case GgmlType::Q8_0: case GgmlType::IQ4_NL:
            return 32;
        default:
            return block_bytes(t) > 0 ? 256 : 0;
    }
}

template <GgmlType T>
struct BlockInfo {
    static_assert(block_bytes(T) > 0, "no device dequantizer for this type");
    static constexpr int bytes = block_bytes(T);
    static constexpr int values = block_values(T);
};

// ---- scalar helpers -------------------------------------------------------------------

// Internal to the dequantizers; a namespace of their own so that kernels including this
// header may define helpers of the same names.
namespace dequant_detail {

STRATA_DEV uint32_t load_u16(const uint8_t* p) { return p[0] | static_cast<uint32_t>(p[1]) << 8; }
STRATA_DEV uint32_t load_u32(const uint8_t* p) {
    return p[0] | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
           static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace dequant_detail

namespace dequant_detail {

STRATA_DEV float load_half(const uint8_t* p) { return fp16_to_f32(static_cast<uint16_t>(load_u16(p))); }

// a * b rounded to f32 on its own, so that a following add is not fused with it.
STRATA_DEV float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

// Flips the sign of v when bit is 1 (the host's apply_sign; exact for NaN too).
STRATA_DEV float apply_sign(float v, uint32_t bit) { return bits_to_f32(f32_to_bits(v) ^ (bit << 31)); }

// kvalues_iq4nl as two words of eight int8, so the lookup needs no memory.
STRATA_DEV float iq4nl_value(uint32_t q) {
    const uint64_t w = q < 8 ? 0xF6EADDCFBFAD9881ull : 0x7159453526190D01ull;
    return static_cast<float>(static_cast<int8_t>(w >> (8 * (q & 7))));
}

// n values db * grid byte k, sign bit k of signs (the host's put_group).
STRATA_DEV void put_group(float* y, float db, uint64_t grid, uint32_t signs, int n) {
    for (int k = 0; k < n; ++k) {
        const uint32_t g = static_cast<uint32_t>(grid >> (8 * k)) & 0xFFu;
        y[k] = apply_sign(db * static_cast<float>(g), (signs >> k) & 1u);
    }
}

// IQ1: 8 values dl * (g + delta), g the int8 bytes of a grid entry (put_iq1_group).
STRATA_DEV void put_iq1_group(float* y, float dl, float delta, uint64_t e) {
    for (int k = 0; k < 8; ++k) y[k] = dl * (static_cast<float>(static_cast<int8_t>(e >> (8 * k))) + delta);
}

// K-quant 6-bit scale and min of sub-block j (Q4_K, Q5_K).
STRATA_DEV void scale_min_k4(int j, const uint8_t* s, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// IQ2 / IQ3 sub-block scales, the host's scale_iq2 / scale_iq3xxs / scale_iq3s.
STRATA_DEV float scale_iq2(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }
STRATA_DEV float scale_iq3xxs(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.5f; }
STRATA_DEV float scale_iq3s(float d, int s) { return d * static_cast<float>(1 + 2 * s); }

constexpr float kIq1Delta = 0.125f;

}  // namespace dequant_detail

// ---- dequant32 ------------------------------------------------------------------------

template <GgmlType T>
STRATA_DEV void dequant32(const uint8_t* blk, int j, float* out, const IqTables& tab);

// Legacy formats: one 32-value chunk per block (j is 0). Nibble layout: qs[l] holds
// value l (low) and value l + 16 (high).

template <>
STRATA_DEV void dequant32<GgmlType::Q4_0>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t* qs = blk + 2;
    for (int l = 0; l < 16; ++l) {
        out[l] = static_cast<float>((qs[l] & 0xF) - 8) * d;
        out[l + 16] = static_cast<float>((qs[l] >> 4) - 8) * d;
    }
}

template <>
STRATA_DEV void dequant32<GgmlType::Q4_1>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk), m = load_half(blk + 2);
    const uint8_t* qs = blk + 4;
    for (int l = 0; l < 16; ++l) {
        out[l] = mul_rn(static_cast<float>(qs[l] & 0xF), d) + m;
        out[l + 16] = mul_rn(static_cast<float>(qs[l] >> 4), d) + m;
    }
}

template <>
STRATA_DEV void dequant32<GgmlType::Q5_0>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint32_t qh = load_u32(blk + 2);
    const uint8_t* qs = blk + 6;
    for (int l = 0; l < 16; ++l) {
        const int q0 = (qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
        const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
        out[l] = static_cast<float>(q0 - 16) * d;
        out[l + 16] = static_cast<float>(q1 - 16) * d;
    }
}

template <>
STRATA_DEV void dequant32<GgmlType::Q5_1>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk), m = load_half(blk + 2);
    const uint32_t qh = load_u32(blk + 4);
    const uint8_t* qs = blk + 8;
    for (int l = 0; l < 16; ++l) {
        const int q0 = (qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1u) << 4);
        const int q1 = (qs[l] >> 4) | static_cast<int>(((qh >> (l + 16)) & 1u) << 4);
        out[l] = mul_rn(static_cast<float>(q0), d) + m;
        out[l + 16] = mul_rn(static_cast<float>(q1), d) + m;
    }
}

template <>
STRATA_DEV void dequant32<GgmlType::Q8_0>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
    for (int l = 0; l < 32; ++l) out[l] = static_cast<float>(qs[l]) * d;
}

template <>
STRATA_DEV void dequant32<GgmlType::IQ4_NL>(const uint8_t* blk, int, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t* qs = blk + 2;
    for (int l = 0; l < 16; ++l) {
        out[l] = d * iq4nl_value(qs[l] & 0xF);
        out[l + 16] = d * iq4nl_value(qs[l] >> 4);
    }
}

// K-quants. Chunk j of Q2_K/Q3_K/Q6_K is 128-value half h = j / 4, 2-bit plane j % 4 (two
// 16-value sub-blocks 2j, 2j + 1); chunk j of Q4_K/Q5_K is sub-block j.

// Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82.
template <>
STRATA_DEV void dequant32<GgmlType::Q2_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk + 80), dmin = load_half(blk + 82);
    const uint8_t* q = blk + 16 + 32 * (j / 4);
    const int shift = 2 * (j % 4);
    for (int half = 0; half < 2; ++half) {
        const uint8_t sc = blk[2 * j + half];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = mul_rn(dmin, static_cast<float>(sc >> 4));
        const uint8_t* qq = q + 16 * half;
        for (int l = 0; l < 16; ++l) out[16 * half + l] = mul_rn(dl, static_cast<float>((qq[l] >> shift) & 3)) - ml;
    }
}

// Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108.
template <>
STRATA_DEV void dequant32<GgmlType::Q3_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d_all = load_half(blk + 108);
    const uint8_t* sc = blk + 96;
    const uint8_t* q = blk + 32 + 32 * (j / 4);
    const int shift = 2 * (j % 4);
    const uint32_t m = 1u << j;  // hmask bit 4h + j % 4
    for (int half = 0; half < 2; ++half) {
        const int s = 2 * j + half;
        const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
        const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        const float dl = d_all * static_cast<float>((low | (high << 4)) - 32);
        const uint8_t* qq = q + 16 * half;
        const uint8_t* hm = blk + 16 * half;
        for (int l = 0; l < 16; ++l) {
            const int v = ((qq[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            out[16 * half + l] = dl * static_cast<float>(v);
        }
    }
}

// Q4_K: d @0, dmin @2, scales[12] @4, qs[128] @16.
template <>
STRATA_DEV void dequant32<GgmlType::Q4_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk), dmin = load_half(blk + 2);
    int sc, mn;
    scale_min_k4(j, blk + 4, &sc, &mn);
    const float d1 = d * static_cast<float>(sc), m1 = mul_rn(dmin, static_cast<float>(mn));
    const uint8_t* q = blk + 16 + 32 * (j / 2);
    const int nshift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) out[l] = mul_rn(d1, static_cast<float>((q[l] >> nshift) & 0xF)) - m1;
}

// Q5_K: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48.
template <>
STRATA_DEV void dequant32<GgmlType::Q5_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk), dmin = load_half(blk + 2);
    int sc, mn;
    scale_min_k4(j, blk + 4, &sc, &mn);
    const float d1 = d * static_cast<float>(sc), m1 = mul_rn(dmin, static_cast<float>(mn));
    const uint8_t* qh = blk + 16;
    const uint8_t* ql = blk + 48 + 32 * (j / 2);
    const int nshift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
        const int q = ((ql[l] >> nshift) & 0xF) + (((qh[l] >> j) & 1) << 4);
        out[l] = mul_rn(d1, static_cast<float>(q)) - m1;
    }
}

// Q6_K: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208. Within half h, plane k:
// low nibbles of ql[l + 32(k & 1)] (k < 2) or high (k >= 2), qh bits 2k..2k+1.
template <>
STRATA_DEV void dequant32<GgmlType::Q6_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk + 208);
    const int h = j / 4, k = j % 4;
    const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
    const uint8_t* qh = blk + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * h + 2 * k;
    const int nshift = 4 * (k >> 1);
    for (int l = 0; l < 32; ++l) {
        const int q = (((ql[l] >> nshift) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        out[l] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q);
    }
}

// Q8_K: d (f32) @0, qs[256] @4, bsums @260.
template <>
STRATA_DEV void dequant32<GgmlType::Q8_K>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = bits_to_f32(load_u32(blk));
    const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 4) + 32 * j;
    for (int l = 0; l < 32; ++l) out[l] = d * static_cast<float>(qs[l]);
}

// IQ formats. Chunk j is sub-block j (32 values).

// IQ4_XS: d @0, scales_h (u16) @2, scales_l[4] @4, qs[128] @8.
template <>
STRATA_DEV void dequant32<GgmlType::IQ4_XS>(const uint8_t* blk, int j, float* out, const IqTables&) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint32_t scales_h = load_u16(blk + 2);
    const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | static_cast<int>(((scales_h >> (2 * j)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    const uint8_t* qs = blk + 8 + 16 * j;
    for (int l = 0; l < 16; ++l) {
        out[l] = dl * iq4nl_value(qs[l] & 0xF);
        out[l + 16] = dl * iq4nl_value(qs[l] >> 4);
    }
}

// IQ3_XXS: d @0, qs[64] grid indices @2, then 8 LE u32 (signs, scale) @66.
template <>
STRATA_DEV void dequant32<GgmlType::IQ3_XXS>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t* qs = blk + 2 + 8 * j;
    const uint32_t aux = load_u32(blk + 66 + 4 * j);
    const float db = scale_iq3xxs(d, static_cast<int>(aux >> 28));
    for (int l = 0; l < 4; ++l) {
        const uint32_t signs = tab.ksigns[(aux >> (7 * l)) & 127];
        put_group(out + 8 * l, db, tab.iq3xxs[qs[2 * l]], signs, 4);
        put_group(out + 8 * l + 4, db, tab.iq3xxs[qs[2 * l + 1]], signs >> 4, 4);
    }
}

// IQ3_S: d @0, qs[64] @2, qh[8] @66, signs[32] @74, scales[4] @106.
template <>
STRATA_DEV void dequant32<GgmlType::IQ3_S>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const float db = scale_iq3s(d, (blk[106 + j / 2] >> (4 * (j % 2))) & 0xF);
    const uint8_t* qs = blk + 2 + 8 * j;
    const uint32_t qh = blk[66 + j];
    for (int l = 0; l < 4; ++l) {
        const uint32_t signs = blk[74 + 4 * j + l];
        const uint32_t i1 = qs[2 * l] | (((qh >> (2 * l)) & 1u) << 8);
        const uint32_t i2 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
        put_group(out + 8 * l, db, tab.iq3s[i1], signs, 4);
        put_group(out + 8 * l + 4, db, tab.iq3s[i2], signs >> 4, 4);
    }
}

// IQ2_XXS: d @0, then per sub-block 8 bytes @2 + 8j: four grid indices, a LE u32.
template <>
STRATA_DEV void dequant32<GgmlType::IQ2_XXS>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t* q8 = blk + 2 + 8 * j;
    const uint32_t aux = load_u32(q8 + 4);
    const float db = scale_iq2(d, static_cast<int>(aux >> 28));
    for (int l = 0; l < 4; ++l)
        put_group(out + 8 * l, db, tab.iq2xxs[q8[l]], tab.ksigns[(aux >> (7 * l)) & 127], 8);
}

// IQ2_XS: d @0, qs[32] (u16: 9-bit index | 7-bit sign index << 9) @2, scales[8] @66.
template <>
STRATA_DEV void dequant32<GgmlType::IQ2_XS>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t sc = blk[66 + j];
    const float db[2] = {scale_iq2(d, sc & 0xF), scale_iq2(d, sc >> 4)};
    for (int l = 0; l < 4; ++l) {
        const uint32_t q = load_u16(blk + 2 + 2 * (4 * j + l));
        put_group(out + 8 * l, db[l / 2], tab.iq2xs[q & 511], tab.ksigns[q >> 9], 8);
    }
}

// IQ2_S: d @0, qs[32] @2, signs[32] @34, qh[8] @66, scales[8] @74.
template <>
STRATA_DEV void dequant32<GgmlType::IQ2_S>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint8_t sc = blk[74 + j];
    const float db[2] = {scale_iq2(d, sc & 0xF), scale_iq2(d, sc >> 4)};
    const uint32_t qh = blk[66 + j];
    for (int l = 0; l < 4; ++l) {
        const uint32_t idx = blk[2 + 4 * j + l] | (((qh >> (2 * l)) & 3u) << 8);
        put_group(out + 8 * l, db[l / 2], tab.iq2s[idx], blk[34 + 4 * j + l], 8);
    }
}

// IQ1_S: d @0, qs[32] @2, qh[8] (u16) @34.
template <>
STRATA_DEV void dequant32<GgmlType::IQ1_S>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const float d = load_half(blk);
    const uint32_t qh = load_u16(blk + 34 + 2 * j);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l)
        put_iq1_group(out + 8 * l, dl, delta, tab.iq1s[blk[2 + 4 * j + l] | (((qh >> (3 * l)) & 7) << 8)]);
}

// IQ1_M: qs[32] @0, qh[16] @32, scales (four LE u16) @48; d is the top nibbles of the
// scale words.
template <>
STRATA_DEV void dequant32<GgmlType::IQ1_M>(const uint8_t* blk, int j, float* out, const IqTables& tab) {
    using namespace dequant_detail;
    const uint8_t* sc = blk + 48;
    const float d = fp16_to_f32(static_cast<uint16_t>((sc[1] >> 4) | (sc[3] & 0xF0) | ((sc[5] & 0xF0) << 4) |
                                                        ((sc[7] & 0xF0) << 8)));
    const uint32_t s = load_u16(sc + 2 * (j / 2)) >> (6 * (j % 2));
    const float dl[2] = {d * static_cast<float>(2 * (s & 7) + 1), d * static_cast<float>(2 * ((s >> 3) & 7) + 1)};
    for (int l = 0; l < 4; ++l) {
        const uint32_t h = static_cast<uint32_t>(blk[32 + 2 * j + l / 2]) >> (4 * (l % 2));
        const float delta = h & 8 ? -kIq1Delta : kIq1Delta;
        put_iq1_group(out + 8 * l, dl[l / 2], delta, tab.iq1s[blk[4 * j + l] | ((h & 7) << 8)]);
    }
}

}  // namespace strata::gpu
