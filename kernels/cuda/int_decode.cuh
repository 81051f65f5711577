// Device-side decoding of the GGML block formats to small integers, for the integer dot
// products of matmul_q.cu: decode16<T>(blk, j, h, w, &ws, &wm, tab) gives values
// [32j + 16h, 32j + 16h + 16) of the block at blk as 16 int8 packed four to an int32 word
// (value 4k + i in byte i of w[k]), with a float scale ws and minimum wm such that
//     value = mul_rn(ws, float(w)) - wm    (wm = 0 where the format has no minimum)
// is bit-identical to dequant32's float (dequant.cuh): ws and wm are computed as it
// computes its d and m, and for IQ1 the 1/8 of the grid's shift moves into ws (w = 8 g +-
// 1, exact since 1/8 is a power of two). tests/gpu/test_gpu_int_decode.cpp checks it.
//
// Blocks of every format are an even number of bytes and rows start at even addresses
// (matmul_q checks it), so 32-bit fields are read as two 16-bit loads.
#pragma once
#include <cstdint>

#include "kernels/cuda/dequant.cuh"

namespace strata::gpu {

// Whether T has a minimum term (wm nonzero); a variable, which device code may read.
template <GgmlType T>
inline constexpr bool kHasMin = T == GgmlType::Q4_1 || T == GgmlType::Q5_1 || T == GgmlType::Q2_K ||
                                T == GgmlType::Q4_K || T == GgmlType::Q5_K;

namespace int_detail {

STRATA_DEV uint32_t ld32(const uint8_t* p) {  // p: even address
    const auto* h = reinterpret_cast<const uint16_t*>(p);
    return h[0] | static_cast<uint32_t>(h[1]) << 16;
}

// Bytewise n - k for bytes n in [0, 0x7F], k <= n + 0x80: no borrow crosses a byte, since
// every byte is lifted by 0x80 first (the result as int8 is n - k).
STRATA_DEV uint32_t sub_bytes(uint32_t n, uint32_t k) { return ((n | 0x80808080u) - k) ^ 0x80808080u; }

// Four int8: grid bytes g (0..127) negated where bit i of signs is set.
STRATA_DEV uint32_t signed_group(uint32_t g, uint32_t signs) {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i) {
        const int v = static_cast<int>((g >> (8 * i)) & 0xFFu);
        out |= (static_cast<uint32_t>((signs >> i) & 1u ? -v : v) & 0xFFu) << (8 * i);
    }
    return out;
}

// Four int8 8 g + s (g: the int8 bytes of an IQ1 grid word, s = -1 or 1).
STRATA_DEV uint32_t iq1_group(uint32_t g, int s) {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i)
        out |= (static_cast<uint32_t>(8 * static_cast<int8_t>(g >> (8 * i)) + s) & 0xFFu) << (8 * i);
    return out;
}

// Four kvalues_iq4nl for the nibbles at bits 0, 8, 16, 24 of n.
STRATA_DEV uint32_t iq4nl_group(uint32_t n) {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i) {
        const uint32_t q = (n >> (8 * i)) & 0xFu;
        const uint64_t t = q < 8 ? 0xF6EADDCFBFAD9881ull : 0x7159453526190D01ull;
        out |= static_cast<uint32_t>((t >> (8 * (q & 7))) & 0xFFu) << (8 * i);
    }
    return out;
}

// Bits 0..3 of x as bit 4 of bytes 0..3.
STRATA_DEV uint32_t spread4(uint32_t x) {
    return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

}  // namespace int_detail

template <GgmlType T>
STRATA_DEV void decode16(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm, const IqTables& tab);

// Legacy formats: one 32-value chunk per block; half h is the low (0) or high (1) nibbles.
template <>
STRATA_DEV void decode16<GgmlType::Q4_0>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = sub_bytes((ld32(blk + 2 + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu, 0x08080808u);
    *ws = dequant_detail::load_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q4_1>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = (ld32(blk + 4 + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu;
    *ws = dequant_detail::load_half(blk);
    *wm = -dequant_detail::load_half(blk + 2);
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_0>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint32_t qh = ld32(blk + 2) >> (16 * h);
    for (int k = 0; k < 4; ++k)
        w[k] = sub_bytes(((ld32(blk + 6 + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu) | spread4(qh >> (4 * k)), 0x10101010u);
    *ws = dequant_detail::load_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_1>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint32_t qh = ld32(blk + 4) >> (16 * h);
    for (int k = 0; k < 4; ++k) w[k] = ((ld32(blk + 8 + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu) | spread4(qh >> (4 * k));
    *ws = dequant_detail::load_half(blk);
    *wm = -dequant_detail::load_half(blk + 2);
}

template <>
STRATA_DEV void decode16<GgmlType::Q8_0>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = ld32(blk + 2 + 16 * h + 4 * k);
    *ws = dequant_detail::load_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ4_NL>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                           const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = iq4nl_group((ld32(blk + 2 + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu);
    *ws = dequant_detail::load_half(blk);
    *wm = 0.0f;
}

// K-quants (the chunk layout of dequant.cuh).
template <>
STRATA_DEV void decode16<GgmlType::Q2_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* q = blk + 16 + 32 * (j / 4) + 16 * h;
    const int shift = 2 * (j % 4);
    for (int k = 0; k < 4; ++k) w[k] = (ld32(q + 4 * k) >> shift) & 0x03030303u;
    const uint8_t sc = blk[2 * j + h];
    *ws = dequant_detail::load_half(blk + 80) * static_cast<float>(sc & 0xF);
    *wm = dequant_detail::mul_rn(dequant_detail::load_half(blk + 82), static_cast<float>(sc >> 4));
}

template <>
STRATA_DEV void decode16<GgmlType::Q3_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* sc = blk + 96;
    const uint8_t* q = blk + 32 + 32 * (j / 4) + 16 * h;
    const uint8_t* hm = blk + 16 * h;
    const int shift = 2 * (j % 4);
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = (ld32(q + 4 * k) >> shift) & 0x03030303u;
        const uint32_t unset = ((ld32(hm + 4 * k) >> j) & 0x01010101u) ^ 0x01010101u;  // 4 is subtracted
        w[k] = sub_bytes(lo, unset << 2);
    }
    const int s = 2 * j + h;
    const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    *ws = dequant_detail::load_half(blk + 108) * static_cast<float>((low | (high << 4)) - 32);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q4_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* q = blk + 16 + 32 * (j / 2) + 16 * h;
    for (int k = 0; k < 4; ++k) w[k] = (ld32(q + 4 * k) >> (4 * (j % 2))) & 0x0F0F0F0Fu;
    int sc, mn;
    dequant_detail::scale_min_k4(j, blk + 4, &sc, &mn);
    *ws = dequant_detail::load_half(blk) * static_cast<float>(sc);
    *wm = dequant_detail::mul_rn(dequant_detail::load_half(blk + 2), static_cast<float>(mn));
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* ql = blk + 48 + 32 * (j / 2) + 16 * h;
    const uint8_t* qh = blk + 16 + 16 * h;
    for (int k = 0; k < 4; ++k)
        w[k] = ((ld32(ql + 4 * k) >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((ld32(qh + 4 * k) >> j) & 0x01010101u) << 4);
    int sc, mn;
    dequant_detail::scale_min_k4(j, blk + 4, &sc, &mn);
    *ws = dequant_detail::load_half(blk) * static_cast<float>(sc);
    *wm = dequant_detail::mul_rn(dequant_detail::load_half(blk + 2), static_cast<float>(mn));
}

template <>
STRATA_DEV void decode16<GgmlType::Q6_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const int half = j / 4, k4 = j % 4;
    const uint8_t* ql = blk + 64 * half + 32 * (k4 & 1) + 16 * h;
    const uint8_t* qh = blk + 128 + 32 * half + 16 * h;
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = (ld32(ql + 4 * k) >> (4 * (k4 >> 1))) & 0x0F0F0F0Fu;
        const uint32_t hi = (ld32(qh + 4 * k) >> (2 * k4)) & 0x03030303u;
        w[k] = sub_bytes(lo | (hi << 4), 0x20202020u);
    }
    const int8_t sc = static_cast<int8_t>(blk[192 + 8 * half + 2 * k4 + h]);
    *ws = dequant_detail::load_half(blk + 208) * static_cast<float>(sc);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q8_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = ld32(blk + 4 + 32 * j + 16 * h + 4 * k);
    *ws = bits_to_f32(ld32(blk));
    *wm = 0.0f;
}

// IQ formats: chunk j is sub-block j; half h holds its eight-value groups 2h and 2h + 1.
template <>
STRATA_DEV void decode16<GgmlType::IQ4_XS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                           const IqTables&) {
    using namespace int_detail;
    for (int k = 0; k < 4; ++k) w[k] = iq4nl_group((ld32(blk + 8 + 16 * j + 4 * k) >> (4 * h)) & 0x0F0F0F0Fu);
    const uint32_t scales_h = dequant_detail::load_u16(blk + 2);
    const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | static_cast<int>(((scales_h >> (2 * j)) & 3) << 4);
    *ws = dequant_detail::load_half(blk) * static_cast<float>(ls - 32);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ3_XXS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                            const IqTables& tab) {
    using namespace int_detail;
    const uint8_t* qs = blk + 2 + 8 * j;
    const uint32_t aux = ld32(blk + 66 + 4 * j);
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint32_t signs = tab.ksigns[(aux >> (7 * l)) & 127];
        w[2 * g] = signed_group(tab.iq3xxs[qs[2 * l]], signs);
        w[2 * g + 1] = signed_group(tab.iq3xxs[qs[2 * l + 1]], signs >> 4);
    }
    *ws = dequant_detail::scale_iq3xxs(dequant_detail::load_half(blk), static_cast<int>(aux >> 28));
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ3_S>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables& tab) {
    using namespace int_detail;
    const uint8_t* qs = blk + 2 + 8 * j;
    const uint32_t qh = blk[66 + j];
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint32_t signs = blk[74 + 4 * j + l];
        const uint32_t i1 = qs[2 * l] | (((qh >> (2 * l)) & 1u) << 8);
        const uint32_t i2 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
        w[2 * g] = signed_group(tab.iq3s[i1], signs);
        w[2 * g + 1] = signed_group(tab.iq3s[i2], signs >> 4);
    }
    *ws = dequant_detail::scale_iq3s(dequant_detail::load_half(blk), (blk[106 + j / 2] >> (4 * (j % 2))) & 0xF);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ2_XXS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                            const IqTables& tab) {
    using namespace int_detail;
    const uint8_t* q8 = blk + 2 + 8 * j;
    const uint32_t aux = ld32(q8 + 4);
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint64_t grid = tab.iq2xxs[q8[l]];
        const uint32_t signs = tab.ksigns[(aux >> (7 * l)) & 127];
        w[2 * g] = signed_group(static_cast<uint32_t>(grid), signs);
        w[2 * g + 1] = signed_group(static_cast<uint32_t>(grid >> 32), signs >> 4);
    }
    *ws = dequant_detail::scale_iq2(dequant_detail::load_half(blk), static_cast<int>(aux >> 28));
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ2_XS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                           const IqTables& tab) {
    using namespace int_detail;
    for (int g = 0; g < 2; ++g) {
        const uint32_t q = dequant_detail::load_u16(blk + 2 + 2 * (4 * j + 2 * h + g));
        const uint64_t grid = tab.iq2xs[q & 511];
        const uint32_t signs = tab.ksigns[q >> 9];
        w[2 * g] = signed_group(static_cast<uint32_t>(grid), signs);
        w[2 * g + 1] = signed_group(static_cast<uint32_t>(grid >> 32), signs >> 4);
    }
    *ws = dequant_detail::scale_iq2(dequant_detail::load_half(blk), (blk[66 + j] >> (4 * h)) & 0xF);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ2_S>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables& tab) {
    using namespace int_detail;
    const uint32_t qh = blk[66 + j];
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint64_t grid = tab.iq2s[blk[2 + 4 * j + l] | (((qh >> (2 * l)) & 3u) << 8)];
        const uint32_t signs = blk[34 + 4 * j + l];
        w[2 * g] = signed_group(static_cast<uint32_t>(grid), signs);
        w[2 * g + 1] = signed_group(static_cast<uint32_t>(grid >> 32), signs >> 4);
    }
    *ws = dequant_detail::scale_iq2(dequant_detail::load_half(blk), (blk[74 + j] >> (4 * h)) & 0xF);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ1_S>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables& tab) {
    using namespace int_detail;
    const uint32_t qh = dequant_detail::load_u16(blk + 34 + 2 * j);
    const int s = qh & 0x8000 ? -1 : 1;
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint64_t e = tab.iq1s[blk[2 + 4 * j + l] | (((qh >> (3 * l)) & 7) << 8)];
        w[2 * g] = iq1_group(static_cast<uint32_t>(e), s);
        w[2 * g + 1] = iq1_group(static_cast<uint32_t>(e >> 32), s);
    }
    const float dl = dequant_detail::load_half(blk) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    *ws = dl * dequant_detail::kIq1Delta;
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ1_M>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables& tab) {
    using namespace int_detail;
    const uint8_t* sc = blk + 48;
    for (int g = 0; g < 2; ++g) {
        const int l = 2 * h + g;
        const uint32_t hb = static_cast<uint32_t>(blk[32 + 2 * j + l / 2]) >> (4 * (l % 2));
        const uint64_t e = tab.iq1s[blk[4 * j + l] | ((hb & 7) << 8)];
        const int s = hb & 8 ? -1 : 1;
        w[2 * g] = iq1_group(static_cast<uint32_t>(e), s);
        w[2 * g + 1] = iq1_group(static_cast<uint32_t>(e >> 32), s);
    }
    const float d = fp16_to_f32(static_cast<uint16_t>((sc[1] >> 4) | (sc[3] & 0xF0) | ((sc[5] & 0xF0) << 4) |
                                                        ((sc[7] & 0xF0) << 8)));
    const uint32_t s6 = dequant_detail::load_u16(sc + 2 * (j / 2)) >> (6 * (j % 2));
    *ws = d * static_cast<float>(2 * ((s6 >> (3 * h)) & 7) + 1) * dequant_detail::kIq1Delta;
    *wm = 0.0f;
}

}  // namespace strata::gpu
