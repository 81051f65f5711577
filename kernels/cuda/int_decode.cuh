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

// An f16 field at an even address, in one load (dequant.cuh reads its fields bytewise).
STRATA_DEV float ld_half(const uint8_t* p) { return fp16_to_f32(*reinterpret_cast<const uint16_t*>(p)); }

// 16 bytes at p as four words (byte 4k + i in byte i of w[k]), by the widest loads that
// A, an alignment of p known at compile time (2, 4, 8 or 16), allows: a kernel bound by
// reading weights is bound first by its count of load instructions, and 16-bit loads
// took eight where one 16-byte load does. At A = 2, p may lie 2 bytes past a multiple of
// 4: aligned 32-bit loads from p - 2 and a 16-bit one for the last two bytes, shifted
// into place, so no byte outside [p - 2, p + 16) is read (p - 2 is still inside the
// tensor: rows of a weight start at 4-aligned addresses or right after another row).
template <int A>
STRATA_DEV void ld128(const uint8_t* p, uint32_t* w) {
    if constexpr (A >= 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else if constexpr (A >= 8) {
        const auto* q = reinterpret_cast<const uint2*>(p);
        const uint2 a = q[0], b = q[1];
        w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y;
    } else if constexpr (A >= 4) {
        const auto* q = reinterpret_cast<const uint32_t*>(p);
        for (int k = 0; k < 4; ++k) w[k] = q[k];
    } else {
        const auto a = reinterpret_cast<uintptr_t>(p);
        const bool mis = (a & 3u) != 0;
        const auto* q = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3));
        uint32_t v[5];
        for (int k = 0; k < 4; ++k) v[k] = q[k];
        v[4] = mis ? *reinterpret_cast<const uint16_t*>(p + 14) : 0u;
        for (int k = 0; k < 4; ++k) w[k] = mis ? (v[k] >> 16) | (v[k + 1] << 16) : v[k];
    }
}

// Byte i (0..11, run time) of the 12 bytes held by words s[0..2], without indexing an
// array by a run-time value (which would put it in local memory).
STRATA_DEV uint32_t byte_of(const uint32_t* s, int i) {
    const uint32_t word = i < 4 ? s[0] : (i < 8 ? s[1] : s[2]);
    return (word >> (8 * (i % 4))) & 0xFFu;
}

// dequant.cuh's scale_min_k4 on the 12 scale bytes held in words s[0..2].
STRATA_DEV void scale_min_k4_words(int j, const uint32_t* s, int* sc, int* mn) {
    if (j < 4) {
        *sc = static_cast<int>(byte_of(s, j) & 63);
        *mn = static_cast<int>(byte_of(s, j + 4) & 63);
    } else {
        const uint32_t hi = byte_of(s, j + 4);
        *sc = static_cast<int>((hi & 0xF) | ((byte_of(s, j - 4) >> 6) << 4));
        *mn = static_cast<int>((hi >> 4) | ((byte_of(s, j) >> 6) << 4));
    }
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
    uint32_t v0[4];
    ld128<2>(blk + 2, v0);
    for (int k = 0; k < 4; ++k) w[k] = sub_bytes((v0[k] >> (4 * h)) & 0x0F0F0F0Fu, 0x08080808u);
    *ws = ld_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q4_1>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    uint32_t v0[4];
    ld128<2>(blk + 4, v0);
    for (int k = 0; k < 4; ++k) w[k] = (v0[k] >> (4 * h)) & 0x0F0F0F0Fu;
    *ws = ld_half(blk);
    *wm = -ld_half(blk + 2);
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_0>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint32_t qh = ld32(blk + 2) >> (16 * h);
    uint32_t v0[4];
    ld128<2>(blk + 6, v0);
    for (int k = 0; k < 4; ++k)
        w[k] = sub_bytes(((v0[k] >> (4 * h)) & 0x0F0F0F0Fu) | spread4(qh >> (4 * k)), 0x10101010u);
    *ws = ld_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_1>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint32_t qh = ld32(blk + 4) >> (16 * h);
    uint32_t v0[4];
    ld128<2>(blk + 8, v0);
    for (int k = 0; k < 4; ++k) w[k] = ((v0[k] >> (4 * h)) & 0x0F0F0F0Fu) | spread4(qh >> (4 * k));
    *ws = ld_half(blk);
    *wm = -ld_half(blk + 2);
}

template <>
STRATA_DEV void decode16<GgmlType::Q8_0>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    uint32_t v0[4];
    ld128<2>(blk + 2 + 16 * h, v0);
    for (int k = 0; k < 4; ++k) w[k] = v0[k];
    *ws = ld_half(blk);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::IQ4_NL>(const uint8_t* blk, int, int h, uint32_t* w, float* ws, float* wm,
                                           const IqTables&) {
    using namespace int_detail;
    uint32_t v0[4];
    ld128<2>(blk + 2, v0);
    for (int k = 0; k < 4; ++k) w[k] = iq4nl_group((v0[k] >> (4 * h)) & 0x0F0F0F0Fu);
    *ws = ld_half(blk);
    *wm = 0.0f;
}

// K-quants (the chunk layout of dequant.cuh).
template <>
STRATA_DEV void decode16<GgmlType::Q2_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* q = blk + 16 + 32 * (j / 4) + 16 * h;
    const int shift = 2 * (j % 4);
    uint32_t v0[4];
    ld128<2>(q, v0);
    for (int k = 0; k < 4; ++k) w[k] = (v0[k] >> shift) & 0x03030303u;
    const uint8_t sc = blk[2 * j + h];
    *ws = ld_half(blk + 80) * static_cast<float>(sc & 0xF);
    *wm = dequant_detail::mul_rn(ld_half(blk + 82), static_cast<float>(sc >> 4));
}

template <>
STRATA_DEV void decode16<GgmlType::Q3_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* sc = blk + 96;
    const uint8_t* q = blk + 32 + 32 * (j / 4) + 16 * h;
    const uint8_t* hm = blk + 16 * h;
    const int shift = 2 * (j % 4);
    uint32_t v0[4];
    ld128<2>(q, v0);
    uint32_t v1[4];
    ld128<2>(hm, v1);
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = (v0[k] >> shift) & 0x03030303u;
        const uint32_t unset = ((v1[k] >> j) & 0x01010101u) ^ 0x01010101u;  // 4 is subtracted
        w[k] = sub_bytes(lo, unset << 2);
    }
    const int s = 2 * j + h;
    const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    *ws = ld_half(blk + 108) * static_cast<float>((low | (high << 4)) - 32);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q4_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* q = blk + 16 + 32 * (j / 2) + 16 * h;
    uint32_t v0[4];
    ld128<2>(q, v0);
    for (int k = 0; k < 4; ++k) w[k] = (v0[k] >> (4 * (j % 2))) & 0x0F0F0F0Fu;
    int sc, mn;
    dequant_detail::scale_min_k4(j, blk + 4, &sc, &mn);
    *ws = ld_half(blk) * static_cast<float>(sc);
    *wm = dequant_detail::mul_rn(ld_half(blk + 2), static_cast<float>(mn));
}

template <>
STRATA_DEV void decode16<GgmlType::Q5_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const uint8_t* ql = blk + 48 + 32 * (j / 2) + 16 * h;
    const uint8_t* qh = blk + 16 + 16 * h;
    uint32_t v0[4];
    ld128<2>(ql, v0);
    uint32_t v1[4];
    ld128<2>(qh, v1);
    for (int k = 0; k < 4; ++k)
        w[k] = ((v0[k] >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((v1[k] >> j) & 0x01010101u) << 4);
    int sc, mn;
    dequant_detail::scale_min_k4(j, blk + 4, &sc, &mn);
    *ws = ld_half(blk) * static_cast<float>(sc);
    *wm = dequant_detail::mul_rn(ld_half(blk + 2), static_cast<float>(mn));
}

template <>
STRATA_DEV void decode16<GgmlType::Q6_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    const int half = j / 4, k4 = j % 4;
    const uint8_t* ql = blk + 64 * half + 32 * (k4 & 1) + 16 * h;
    const uint8_t* qh = blk + 128 + 32 * half + 16 * h;
    uint32_t v0[4];
    ld128<2>(ql, v0);
    uint32_t v1[4];
    ld128<2>(qh, v1);
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = (v0[k] >> (4 * (k4 >> 1))) & 0x0F0F0F0Fu;
        const uint32_t hi = (v1[k] >> (2 * k4)) & 0x03030303u;
        w[k] = sub_bytes(lo | (hi << 4), 0x20202020u);
    }
    const int8_t sc = static_cast<int8_t>(blk[192 + 8 * half + 2 * k4 + h]);
    *ws = ld_half(blk + 208) * static_cast<float>(sc);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16<GgmlType::Q8_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                         const IqTables&) {
    using namespace int_detail;
    uint32_t v0[4];
    ld128<2>(blk + 4 + 32 * j + 16 * h, v0);
    for (int k = 0; k < 4; ++k) w[k] = v0[k];
    *ws = bits_to_f32(ld32(blk));
    *wm = 0.0f;
}

// IQ formats: chunk j is sub-block j; half h holds its eight-value groups 2h and 2h + 1.
template <>
STRATA_DEV void decode16<GgmlType::IQ4_XS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                           const IqTables&) {
    using namespace int_detail;
    uint32_t v0[4];
    ld128<2>(blk + 8 + 16 * j, v0);
    for (int k = 0; k < 4; ++k) w[k] = iq4nl_group((v0[k] >> (4 * h)) & 0x0F0F0F0Fu);
    const uint32_t scales_h = dequant_detail::load_u16(blk + 2);
    const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | static_cast<int>(((scales_h >> (2 * j)) & 3) << 4);
    *ws = ld_half(blk) * static_cast<float>(ls - 32);
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
    *ws = dequant_detail::scale_iq3xxs(ld_half(blk), static_cast<int>(aux >> 28));
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
    *ws = dequant_detail::scale_iq3s(ld_half(blk), (blk[106 + j / 2] >> (4 * (j % 2))) & 0xF);
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
    *ws = dequant_detail::scale_iq2(ld_half(blk), static_cast<int>(aux >> 28));
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
    *ws = dequant_detail::scale_iq2(ld_half(blk), (blk[66 + j] >> (4 * h)) & 0xF);
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
    *ws = dequant_detail::scale_iq2(ld_half(blk), (blk[74 + j] >> (4 * h)) & 0xF);
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
    const float dl = ld_half(blk) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
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


// decode16 for blocks in rows whose address and stride are multiples of 16 (matmul_q.cu
// checks): the formats whose blocks then stay aligned read their values, and Q4_K and
// Q5_K their 16-byte header too, in the widest loads; the same values as decode16. The
// other formats are decode16 (kAligned<T> false: kernels instantiate nothing more for them).
template <GgmlType T>
inline constexpr bool kAligned =
    T == GgmlType::Q4_K || T == GgmlType::Q5_K || T == GgmlType::IQ4_XS || T == GgmlType::Q2_K;

template <GgmlType T>
STRATA_DEV void decode16a(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm, const IqTables& tab) {
    decode16<T>(blk, j, h, w, ws, wm, tab);
}

namespace int_detail {

// Q4_K and Q5_K from their header's words hd (d, dmin, 12 scale bytes) and nibble words.
STRATA_DEV void k4_scales(const uint32_t* hd, int j, float* ws, float* wm) {
    int sc, mn;
    scale_min_k4_words(j, hd + 1, &sc, &mn);
    *ws = fp16_to_f32(static_cast<uint16_t>(hd[0])) * static_cast<float>(sc);
    *wm = dequant_detail::mul_rn(fp16_to_f32(static_cast<uint16_t>(hd[0] >> 16)), static_cast<float>(mn));
}

}  // namespace int_detail

template <>
STRATA_DEV void decode16a<GgmlType::Q4_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables&) {
    using namespace int_detail;
    uint32_t hd[4], q[4];
    ld128<16>(blk, hd);
    ld128<16>(blk + 16 + 32 * (j / 2) + 16 * h, q);
    for (int k = 0; k < 4; ++k) w[k] = (q[k] >> (4 * (j % 2))) & 0x0F0F0F0Fu;
    k4_scales(hd, j, ws, wm);
}

template <>
STRATA_DEV void decode16a<GgmlType::Q5_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables&) {
    using namespace int_detail;
    uint32_t hd[4], ql[4], qh[4];
    ld128<16>(blk, hd);
    ld128<16>(blk + 48 + 32 * (j / 2) + 16 * h, ql);
    ld128<16>(blk + 16 + 16 * h, qh);
    for (int k = 0; k < 4; ++k)
        w[k] = ((ql[k] >> (4 * (j % 2))) & 0x0F0F0F0Fu) | (((qh[k] >> j) & 0x01010101u) << 4);
    k4_scales(hd, j, ws, wm);
}

template <>
STRATA_DEV void decode16a<GgmlType::IQ4_XS>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                            const IqTables&) {
    using namespace int_detail;
    uint32_t q[4];
    ld128<8>(blk + 8 + 16 * j, q);  // blocks of 136 bytes: 8-aligned
    for (int k = 0; k < 4; ++k) w[k] = iq4nl_group((q[k] >> (4 * h)) & 0x0F0F0F0Fu);
    const uint32_t head = *reinterpret_cast<const uint32_t*>(blk);  // d, scales_h
    const uint32_t scales_h = head >> 16;
    const int ls = ((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | static_cast<int>(((scales_h >> (2 * j)) & 3) << 4);
    *ws = fp16_to_f32(static_cast<uint16_t>(head)) * static_cast<float>(ls - 32);
    *wm = 0.0f;
}

template <>
STRATA_DEV void decode16a<GgmlType::Q2_K>(const uint8_t* blk, int j, int h, uint32_t* w, float* ws, float* wm,
                                          const IqTables&) {
    using namespace int_detail;
    uint32_t q[4];
    ld128<4>(blk + 16 + 32 * (j / 4) + 16 * h, q);  // blocks of 84 bytes: 4-aligned
    const int shift = 2 * (j % 4);
    for (int k = 0; k < 4; ++k) w[k] = (q[k] >> shift) & 0x03030303u;
    const uint8_t sc = blk[2 * j + h];
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(blk + 80);  // d, dmin
    *ws = fp16_to_f32(static_cast<uint16_t>(dd)) * static_cast<float>(sc & 0xF);
    *wm = dequant_detail::mul_rn(fp16_to_f32(static_cast<uint16_t>(dd >> 16)), static_cast<float>(sc >> 4));
}

}  // namespace strata::gpu
