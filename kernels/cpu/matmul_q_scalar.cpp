// The scalar path of the integer-dot matmul (matmul_q.h): the plain statement of the
// canonical computation that the SIMD paths reproduce bit for bit.
#include <atomic>
#include <cstring>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cpu/matmul_q.h"
#include "kernels/cpu/simd_forms.h"

// No FMA contraction (GCC's C++ default is to contract where the target has FMA, e.g.
// under -march=native): the canonical order is a multiply then an add.
#pragma GCC optimize("fp-contract=off")

namespace strata::kq {
namespace {

std::atomic<int> g_forced{-1};

struct Blk {
    int8_t w[32];
    float ws = 0, wm = 0;
    int32_t m0 = 1, m1 = 1;
    int32_t n0 = 0, n1 = 0;  // Q2_K: the halves' minimums (matmul_q.h)
};

// The N magnitudes of a grid entry e (byte v: value v) as w[v], negated where bit v of
// signs is set (the IQ2 and IQ3 formats).
template <int N>
void put_signed(int8_t* w, uint64_t e, uint32_t signs) {
    for (int v = 0; v < N; ++v) {
        const int m = static_cast<int>((e >> (8 * v)) & 0xFF);
        w[v] = static_cast<int8_t>((signs >> v) & 1 ? -m : m);
    }
}

// IQ1: the eight signed grid values g of e (byte v: value v) as w[v] = 8 g + shift.
inline void put_iq1(int8_t* w, uint64_t e, int shift) {
    for (int v = 0; v < 8; ++v) w[v] = static_cast<int8_t>(8 * static_cast<int8_t>(e >> (8 * v)) + shift);
}

template <typename B>
const B& sblock(const uint8_t* row, int64_t i) {
    return *reinterpret_cast<const B*>(row + static_cast<size_t>(i) * sizeof(B));
}

void decode(GgmlType type, const uint8_t* row, int64_t b, Blk& k) {
    const int64_t i = b / 8;
    const int j = static_cast<int>(b % 8);
    switch (type) {
    case GgmlType::Q8_0: {
        const auto& x = sblock<block_q8_0>(row, b);
        std::memcpy(k.w, x.qs, 32);
        k.ws = half_to_float(x.d);
        break;
    }
    case GgmlType::Q4_0: {
        const auto& x = sblock<block_q4_0>(row, b);
        for (int l = 0; l < 16; ++l) {
            k.w[l] = static_cast<int8_t>((x.qs[l] & 0xF) - 8);
            k.w[l + 16] = static_cast<int8_t>((x.qs[l] >> 4) - 8);
        }
        k.ws = half_to_float(x.d);
        break;
    }
    case GgmlType::Q4_1: {  // unsigned nibbles; the minimum enters negated (matmul_q.h)
        const auto& x = sblock<block_q4_1>(row, b);
        for (int l = 0; l < 16; ++l) {
            k.w[l] = static_cast<int8_t>(x.qs[l] & 0xF);
            k.w[l + 16] = static_cast<int8_t>(x.qs[l] >> 4);
        }
        k.ws = half_to_float(x.d);
        k.wm = -half_to_float(x.m);
        break;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {  // the nibbles with bit l of qh as bit 4: Q5_0 less 16, Q5_1 unsigned
        const bool q51 = type == GgmlType::Q5_1;
        const uint8_t* qs = q51 ? sblock<block_q5_1>(row, b).qs : sblock<block_q5_0>(row, b).qs;
        uint32_t qh;
        std::memcpy(&qh, q51 ? sblock<block_q5_1>(row, b).qh : sblock<block_q5_0>(row, b).qh, 4);
        for (int l = 0; l < 16; ++l) {
            k.w[l] = static_cast<int8_t>(((qs[l] & 0xF) | ((qh >> l) & 1) << 4) - (q51 ? 0 : 16));
            k.w[l + 16] = static_cast<int8_t>(((qs[l] >> 4) | ((qh >> (l + 16)) & 1) << 4) - (q51 ? 0 : 16));
        }
        k.ws = half_to_float(q51 ? sblock<block_q5_1>(row, b).d : sblock<block_q5_0>(row, b).d);
        if (q51) k.wm = -half_to_float(sblock<block_q5_1>(row, b).m);
        break;
    }
    case GgmlType::IQ4_NL: {
        const auto& x = sblock<block_iq4_nl>(row, b);
        for (int l = 0; l < 16; ++l) {
            k.w[l] = kValuesIq4nl[x.qs[l] & 0xF];
            k.w[l + 16] = kValuesIq4nl[x.qs[l] >> 4];
        }
        k.ws = half_to_float(x.d);
        break;
    }
    case GgmlType::Q4_K: {
        const auto& x = sblock<block_q4_K>(row, i);
        const uint8_t* q = x.qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) k.w[l] = static_cast<int8_t>(j % 2 ? q[l] >> 4 : q[l] & 0xF);
        int sc, mn;
        q4k_scale_min(x.scales, j, &sc, &mn);
        k.ws = half_to_float(x.d) * static_cast<float>(sc);
        k.wm = half_to_float(x.dmin) * static_cast<float>(mn);
        break;
    }
    case GgmlType::Q2_K: {  // w in [0, 3]; per half a 4-bit scale (m) and minimum (n)
        const auto& x = sblock<block_q2_K>(row, i);
        const int h = j / 4, c = j % 4;
        for (int l = 0; l < 32; ++l) k.w[l] = static_cast<int8_t>((x.qs[32 * h + l] >> (2 * c)) & 3);
        k.m0 = x.scales[2 * j] & 0xF;
        k.m1 = x.scales[2 * j + 1] & 0xF;
        k.n0 = x.scales[2 * j] >> 4;
        k.n1 = x.scales[2 * j + 1] >> 4;
        k.ws = half_to_float(x.d);
        k.wm = half_to_float(x.dmin);
        break;
    }
    case GgmlType::Q3_K: {  // w in [-4, 3] with the 16-value sub-scales as m0, m1 (Q6_K's form)
        const auto& x = sblock<block_q3_K>(row, i);
        const int h = j / 4, c = j % 4;
        for (int l = 0; l < 32; ++l)
            k.w[l] = static_cast<int8_t>(((x.qs[32 * h + l] >> (2 * c)) & 3) - ((x.hmask[l] >> (4 * h + c)) & 1 ? 0 : 4));
        k.m0 = q3k_scale(x.scales, 2 * j);
        k.m1 = q3k_scale(x.scales, 2 * j + 1);
        k.ws = half_to_float(x.d);
        break;
    }
    case GgmlType::Q5_K: {  // Q4_K's nibbles and scales, plus bit j of qh[l] as bit 4
        const auto& x = sblock<block_q5_K>(row, i);
        const uint8_t* q = x.qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l)
            k.w[l] = static_cast<int8_t>((j % 2 ? q[l] >> 4 : q[l] & 0xF) | (((x.qh[l] >> j) & 1) << 4));
        int sc, mn;
        q4k_scale_min(x.scales, j, &sc, &mn);
        k.ws = half_to_float(x.d) * static_cast<float>(sc);
        k.wm = half_to_float(x.dmin) * static_cast<float>(mn);
        break;
    }
    case GgmlType::Q6_K: {
        const auto& x = sblock<block_q6_K>(row, i);
        const int h = j / 4, c = j % 4;
        const uint8_t* ql = x.ql + 64 * h + 32 * (c % 2);
        const uint8_t* qh = x.qh + 32 * h;
        for (int l = 0; l < 32; ++l) {
            const int lo = c < 2 ? ql[l] & 0xF : ql[l] >> 4;
            const int hi = (qh[l] >> (2 * c)) & 3;
            k.w[l] = static_cast<int8_t>((lo | (hi << 4)) - 32);
        }
        k.m0 = x.scales[8 * h + 2 * c];
        k.m1 = x.scales[8 * h + 2 * c + 1];
        k.ws = half_to_float(x.d);
        break;
    }
    case GgmlType::IQ4_XS: {
        const auto& x = sblock<block_iq4_xs>(row, i);
        const uint8_t* qs = x.qs + 16 * j;
        for (int l = 0; l < 16; ++l) {
            k.w[l] = kValuesIq4nl[qs[l] & 0xF];
            k.w[l + 16] = kValuesIq4nl[qs[l] >> 4];
        }
        const int ls = ((x.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((x.scales_h >> (2 * j)) & 3) << 4);
        k.ws = half_to_float(x.d) * static_cast<float>(ls - 32);
        break;
    }
    case GgmlType::IQ3_XXS: {
        const auto& x = sblock<block_iq3_xxs>(row, i);
        const uint8_t* qs = x.qs + 8 * j;
        uint32_t aux;
        std::memcpy(&aux, x.qs + 64 + 4 * j, 4);
        for (int g = 0; g < 8; ++g) {
            const uint32_t e = iq::kIq3xxsGrid[qs[g]];
            const uint32_t signs = iq::kSignsIq2xs[(aux >> (7 * (g / 2))) & 127] >> (4 * (g % 2));
            put_signed<4>(k.w + 4 * g, e, signs);
        }
        k.ws = half_to_float(x.d) * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        break;
    }
    case GgmlType::IQ2_XXS: {  // as IQ3_XXS with 8-value grid entries; ws = d (0.5 + s) / 4
        const auto& x = sblock<block_iq2_xxs>(row, i);
        const uint8_t* qs = x.qs + 8 * j;
        uint32_t aux;
        std::memcpy(&aux, qs + 4, 4);
        for (int g = 0; g < 4; ++g) {
            const uint64_t e = iq::kIq2xxsGrid[qs[g]];
            const uint32_t signs = iq::kSignsIq2xs[(aux >> (7 * g)) & 127];
            put_signed<8>(k.w + 8 * g, e, signs);
        }
        k.ws = half_to_float(x.d) * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
        break;
    }
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: {
        // Per 8 values a grid entry and eight signs (IQ2_XS: a 9-bit index and a 7-bit
        // sign index in one word; IQ2_S: a 10-bit index, explicit sign bytes); the halves'
        // scales d (0.5 + s) / 4 = (d / 8) (2 s + 1) as integer sub-scales m0, m1.
        const bool xs = type == GgmlType::IQ2_XS;
        for (int g = 0; g < 4; ++g) {
            uint64_t e;
            uint32_t signs;
            if (xs) {
                const uint16_t q = sblock<block_iq2_xs>(row, i).qs[4 * j + g];
                e = iq::kIq2xsGrid[q & 511];
                signs = iq::kSignsIq2xs[q >> 9];
            } else {
                const auto& x = sblock<block_iq2_s>(row, i);
                e = iq::kIq2sGrid[x.qs[4 * j + g] | ((x.qh[j] >> (2 * g)) & 3) << 8];
                signs = x.qs[32 + 4 * j + g];
            }
            put_signed<8>(k.w + 8 * g, e, signs);
        }
        const uint8_t sc = xs ? sblock<block_iq2_xs>(row, i).scales[j] : sblock<block_iq2_s>(row, i).scales[j];
        k.m0 = 2 * (sc & 0xF) + 1;
        k.m1 = 2 * (sc >> 4) + 1;
        k.ws = half_to_float(xs ? sblock<block_iq2_xs>(row, i).d : sblock<block_iq2_s>(row, i).d) * 0.125f;
        break;
    }
    case GgmlType::IQ3_S: {  // 4-value entries of a 9-bit index, explicit signs; ws = d (1 + 2 s)
        const auto& x = sblock<block_iq3_s>(row, i);
        for (int g = 0; g < 8; ++g) {
            const uint32_t e = iq::kIq3sGrid[x.qs[8 * j + g] | ((x.qh[j] >> g) & 1) << 8];
            const uint32_t signs = x.signs[4 * j + g / 2] >> (4 * (g % 2));
            put_signed<4>(k.w + 4 * g, e, signs);
        }
        k.ws = half_to_float(x.d) * static_cast<float>(1 + 2 * ((x.scales[j / 2] >> (4 * (j % 2))) & 0xF));
        break;
    }
    case GgmlType::IQ1_S: {
        // w = 8 * grid + shift (shift = +-1, ggml's delta of +-1/8 times 8), in [-9, 9]; the
        // scale carries the 1/8.
        const auto& x = sblock<block_iq1_s>(row, i);
        const uint32_t qh = x.qh[j];
        const int shift = qh & 0x8000 ? -1 : 1;
        for (int g = 0; g < 4; ++g) {
            const uint64_t e = iq::kIq1sGrid[x.qs[4 * j + g] | (((qh >> (3 * g)) & 7) << 8)];
            put_iq1(k.w + 8 * g, e, shift);
        }
        k.ws = half_to_float(x.d) * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * 0.125f;
        break;
    }
    case GgmlType::IQ1_M: {
        // As IQ1_S with a shift per 8 values; the two 16-value halves' scales 2s + 1 are
        // the integer sub-scales m0, m1 (as Q6_K's), ws = d / 8.
        const auto& x = sblock<block_iq1_m>(row, i);
        for (int g = 0; g < 4; ++g) {
            const uint32_t h = static_cast<uint32_t>(x.qh[2 * j + g / 2]) >> (4 * (g % 2));
            const uint64_t e = iq::kIq1sGrid[x.qs[4 * j + g] | ((h & 7) << 8)];
            const int shift = h & 8 ? -1 : 1;
            put_iq1(k.w + 8 * g, e, shift);
        }
        uint16_t sc[4];
        std::memcpy(sc, x.scales, 8);
        k.m0 = 2 * ((sc[j / 2] >> (6 * (j % 2))) & 7) + 1;
        k.m1 = 2 * ((sc[j / 2] >> (6 * (j % 2) + 3)) & 7) + 1;
        k.ws = half_to_float(iq1m_scale_bits(x)) * 0.125f;
        break;
    }
    default:
        fail("kq::decode: type {} has no integer path", type_info(type).name);
    }
}

// Value i of row j of a block laid out as Q4_K's packed nibbles (matmul_q.h): four 64-byte
// vectors, value 4c + i' in the low nibble of vector c, value 16 + 4c + i' in the high one.
inline int packed_nibble(const uint8_t (&q)[4][16][4], int j, int i) {
    const uint8_t v = q[i / 4 % 4][j][i % 4];
    return i < 16 ? v & 0xF : v >> 4;
}

// Block b of row r from the packed copy (matmul_q.h): the same Blk as decode() gives.
void decode_packed(const MatView& w, int64_t r, int64_t b, Blk& k) {
    const int j = static_cast<int>(r % kPackRows);
    const int64_t group = r / kPackRows, blk = b % 8;
    const int64_t super_per_group = w.n_in / 256;  // units of the 256-value layouts
    switch (w.type) {
    case GgmlType::Q8_0: {
        const PackedQ8& p = static_cast<const PackedQ8*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i) k.w[i] = static_cast<int8_t>(p.u[i / 4][j][i % 4] - 128);
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::Q4_0: {
        const PackedQ40& p = static_cast<const PackedQ40*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i) k.w[i] = static_cast<int8_t>(packed_nibble(p.q, j, i) - 8);
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::IQ4_NL: {
        const PackedQ40& p = static_cast<const PackedQ40*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i) k.w[i] = kValuesIq4nl[packed_nibble(p.q, j, i)];
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::Q4_1: {
        const PackedQ41& p = static_cast<const PackedQ41*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i) k.w[i] = static_cast<int8_t>(packed_nibble(p.q, j, i));
        k.ws = half_to_float(p.d[j]);
        k.wm = -half_to_float(p.m[j]);
        break;
    }
    case GgmlType::Q5_0: {
        const PackedQ50& p = static_cast<const PackedQ50*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i)
            k.w[i] = static_cast<int8_t>((packed_nibble(p.q, j, i) | ((p.hb[j][i % 4] >> (i / 4)) & 1) << 4) - 16);
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::Q5_1: {
        const PackedQ51& p = static_cast<const PackedQ51*>(w.packed)[group * (w.n_in / 32) + b];
        for (int i = 0; i < 32; ++i)
            k.w[i] = static_cast<int8_t>(packed_nibble(p.q, j, i) | ((p.hb[j][i % 4] >> (i / 4)) & 1) << 4);
        k.ws = half_to_float(p.d[j]);
        k.wm = -half_to_float(p.m[j]);
        break;
    }
    case GgmlType::Q4_K: {
        const PackedQ4K& p = static_cast<const PackedQ4K*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i) k.w[i] = static_cast<int8_t>(packed_nibble(p.q[blk], j, i));
        k.ws = half_to_float(p.d[j]) * static_cast<float>(p.sc[blk][j]);
        k.wm = half_to_float(p.dmin[j]) * static_cast<float>(p.mn[blk][j]);
        break;
    }
    case GgmlType::Q2_K: {
        const PackedQ2K& p = static_cast<const PackedQ2K*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i) {
            const int c = i / 4;
            k.w[i] = static_cast<int8_t>((p.lo[blk][c / 4][j][i % 4] >> (2 * (c % 4))) & 3);
        }
        k.m0 = p.sc[2 * blk][j] & 0xF;
        k.m1 = p.sc[2 * blk + 1][j] & 0xF;
        k.n0 = p.sc[2 * blk][j] >> 4;
        k.n1 = p.sc[2 * blk + 1][j] >> 4;
        k.ws = half_to_float(p.d[j]);
        k.wm = half_to_float(p.dmin[j]);
        break;
    }
    case GgmlType::Q3_K: {
        const PackedQ3K& p = static_cast<const PackedQ3K*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i) {
            const int c = i / 4, lo = (p.lo[blk][c / 4][j][i % 4] >> (2 * (c % 4))) & 3;
            const int hi = (p.hb[blk][j][i % 4] >> c) & 1;
            k.w[i] = static_cast<int8_t>((lo | (hi << 2)) - 4);
        }
        k.m0 = p.sc[2 * blk][j];
        k.m1 = p.sc[2 * blk + 1][j];
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::Q5_K: {
        const PackedQ5K& p = static_cast<const PackedQ5K*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i)
            k.w[i] = static_cast<int8_t>(packed_nibble(p.q[blk], j, i) | (((p.hb[blk][j][i % 4] >> (i / 4)) & 1) << 4));
        k.ws = half_to_float(p.d[j]) * static_cast<float>(p.sc[blk][j]);
        k.wm = half_to_float(p.dmin[j]) * static_cast<float>(p.mn[blk][j]);
        break;
    }
    case GgmlType::Q6_K: {
        const PackedQ6K& p = static_cast<const PackedQ6K*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i) {
            const int col = i / 4;  // four-value column; its high bits are field col % 4 of vector col / 4
            const int hi = (p.hi[blk][col / 4][j][i % 4] >> (2 * (col % 4))) & 3;
            k.w[i] = static_cast<int8_t>((packed_nibble(p.lo[blk], j, i) | hi << 4) - 32);
        }
        k.m0 = p.sc[2 * blk][j];
        k.m1 = p.sc[2 * blk + 1][j];
        k.ws = half_to_float(p.d[j]);
        break;
    }
    case GgmlType::IQ4_XS: {
        const PackedIQ4XS& p = static_cast<const PackedIQ4XS*>(w.packed)[group * super_per_group + b / 8];
        for (int i = 0; i < 32; ++i) k.w[i] = kValuesIq4nl[packed_nibble(p.q[blk], j, i)];
        const int ls = static_cast<int>((p.sl[j] >> (4 * blk)) & 0xF) | ((p.sh[j] >> (2 * blk)) & 3) << 4;
        k.ws = half_to_float(p.d[j]) * static_cast<float>(ls - 32);
        break;
    }
    case GgmlType::IQ2_XXS: {
        const PackedIQ2XXS& p = static_cast<const PackedIQ2XXS*>(w.packed)[group * super_per_group + b / 8];
        for (int g = 0; g < 4; ++g) put_signed<8>(k.w + 8 * g, iq::kIq2xxsGrid[p.q[blk][g][j]], p.sg[blk][j] >> (8 * g));
        k.ws = half_to_float(p.d[j]) * (0.5f + static_cast<float>((p.sc[j] >> (4 * blk)) & 0xF)) * 0.25f;
        break;
    }
    case GgmlType::IQ1_S: {
        const PackedIQ1S& p = static_cast<const PackedIQ1S*>(w.packed)[group * super_per_group + b / 8];
        const uint32_t qh = p.qh[blk][j];
        const int shift = qh & 0x8000 ? -1 : 1;
        for (int g = 0; g < 4; ++g) {
            const uint64_t e = iq::kIq1sGrid[p.q[blk][g][j] | ((qh >> (3 * g)) & 7) << 8];
            put_iq1(k.w + 8 * g, e, shift);
        }
        k.ws = half_to_float(p.d[j]) * static_cast<float>(2 * ((qh >> 12) & 7) + 1) * 0.125f;
        break;
    }
    case GgmlType::IQ1_M: {
        const PackedIQ1M& p = static_cast<const PackedIQ1M*>(w.packed)[group * super_per_group + b / 8];
        for (int g = 0; g < 4; ++g) {
            const uint32_t h = static_cast<uint32_t>(p.qh[blk][g / 2][j]) >> (4 * (g % 2));
            const uint64_t e = iq::kIq1sGrid[p.q[blk][g][j] | (h & 7) << 8];
            const int shift = h & 8 ? -1 : 1;
            put_iq1(k.w + 8 * g, e, shift);
        }
        k.m0 = 2 * (p.sc[blk][j] & 7) + 1;
        k.m1 = 2 * ((p.sc[blk][j] >> 3) & 7) + 1;
        k.ws = half_to_float(p.d[j]) * 0.125f;
        break;
    }
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: {
        const int64_t at = group * super_per_group + b / 8;
        uint8_t sc;
        uint16_t d;
        if (w.type == GgmlType::IQ2_XS) {
            const PackedIQ2XS& p = static_cast<const PackedIQ2XS*>(w.packed)[at];
            for (int g = 0; g < 4; ++g) {
                const uint16_t q = p.q[blk][g][j];
                put_signed<8>(k.w + 8 * g, iq::kIq2xsGrid[q & 511], iq::kSignsIq2xs[q >> 9]);
            }
            sc = p.sc[blk][j];
            d = p.d[j];
        } else {
            const PackedIQ2S& p = static_cast<const PackedIQ2S*>(w.packed)[at];
            for (int g = 0; g < 4; ++g)
                put_signed<8>(k.w + 8 * g, iq::kIq2sGrid[p.q[blk][g][j] | ((p.qh[blk][j] >> (2 * g)) & 3) << 8], p.sg[blk][g][j]);
            sc = p.sc[blk][j];
            d = p.d[j];
        }
        k.m0 = 2 * (sc & 0xF) + 1;
        k.m1 = 2 * (sc >> 4) + 1;
        k.ws = half_to_float(d) * 0.125f;
        break;
    }
    case GgmlType::IQ3_S: {
        const PackedIQ3S& p = static_cast<const PackedIQ3S*>(w.packed)[group * super_per_group + b / 8];
        for (int c = 0; c < 8; ++c)
            put_signed<4>(k.w + 4 * c, iq::kIq3sGrid[p.q[blk][c][j] | ((p.qh[blk][j] >> c) & 1) << 8], p.sg[blk][j] >> (4 * c));
        k.ws = half_to_float(p.d[j]) * static_cast<float>(1 + 2 * ((p.sc[j] >> (4 * blk)) & 0xF));
        break;
    }
    case GgmlType::IQ3_XXS: {
        const PackedIQ3XXS& p = static_cast<const PackedIQ3XXS*>(w.packed)[group * super_per_group + b / 8];
        for (int c = 0; c < 8; ++c) put_signed<4>(k.w + 4 * c, iq::kIq3xxsGrid[p.q[blk][c][j]], p.sg[blk][j] >> (4 * c));
        k.ws = half_to_float(p.d[j]) * (0.5f + static_cast<float>((p.sc[j] >> (4 * blk)) & 0xF)) * 0.5f;
        break;
    }
    default:
        fail("kq: type {} has no packed layout", type_info(w.type).name);
    }
}

}  // namespace

bool supported(GgmlType t) {
    switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ1_S:
    case GgmlType::IQ1_M:
        return true;
    default:
        return false;
    }
}

bool available(Isa isa) {
    static const bool avx_vnni = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avxvnni");
    }();
    switch (isa) {
    case Isa::Scalar: return true;
    case Isa::AvxVnni: return avx_vnni;
    case Isa::Avx2: return detected() >= Isa::Avx2;
    case Isa::Avx512Vnni: return detected() >= Isa::Avx512Vnni;
    case Isa::Amx: return detected() == Isa::Amx;
    }
    return false;
}

Isa detected() {
    static const Isa isa = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("f16c"))
            return amx_usable() ? Isa::Amx : Isa::Avx512Vnni;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"))
            return __builtin_cpu_supports("avxvnni") ? Isa::AvxVnni : Isa::Avx2;
        return Isa::Scalar;
    }();
    return isa;
}

Isa active() {
    const int f = g_forced.load(std::memory_order_relaxed);
    return f < 0 ? detected() : static_cast<Isa>(f);
}

bool forced() { return g_forced.load(std::memory_order_relaxed) >= 0; }

void force(int isa) {
    STRATA_CHECK(isa < 0 || (isa < kIsaCount && available(static_cast<Isa>(isa))), "kq::force: path {} not available", isa);
    g_forced.store(isa, std::memory_order_relaxed);
}

const char* name(Isa isa) {
    switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::AvxVnni: return "avx-vnni";
    case Isa::Avx512Vnni: return "avx512-vnni";
    case Isa::Amx: return "amx";
    }
    return "?";
}

void rows_scalar(const Job& job, int64_t r0, int64_t r1) {
    const MatView& w = *job.w;
    const ActQ& x = *job.x;
    const bool q2 = w.type == GgmlType::Q2_K;
    const bool has_min = w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K || w.type == GgmlType::Q4_1 ||
                         w.type == GgmlType::Q5_1 || q2;
    Blk k;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < x.T; ++t) {
            const int8_t* xq = x.qt(t);
            const int8_t* xr = x.rt(t);
            float acc = 0.0f, mn = 0.0f;
            for (int64_t b = 0; b < x.nb; ++b) {
                if (w.packed)
                    decode_packed(w, r, b, k);
                else
                    decode(w.type, w.row(r), b, k);
                const float dx = x.dt(t)[b];
                int32_t p0 = 0, p1 = 0;  // the block's two halves (Q6_K's sub-blocks)
                for (int i = 0; i < 16; ++i) p0 += int32_t{k.w[i]} * (128 * xq[32 * b + i] + xr[32 * b + i]);
                for (int i = 16; i < 32; ++i) p1 += int32_t{k.w[i]} * (128 * xq[32 * b + i] + xr[32 * b + i]);
                const int32_t p = k.m0 * p0 + k.m1 * p1;  // m0 = m1 = 1 but for Q2_K, Q3_K, Q6_K, IQ2_XS, IQ2_S and IQ1_M
                acc = acc + (k.ws * dx) * static_cast<float>(p);
                int32_t ms = x.st(t)[b];  // the block's sum of x, or Q2_K's halves' sums times their minimums
                if (q2) {
                    int32_t s0 = 0, s1 = 0;
                    for (int i = 0; i < 16; ++i) s0 += 128 * xq[32 * b + i] + xr[32 * b + i];
                    for (int i = 16; i < 32; ++i) s1 += 128 * xq[32 * b + i] + xr[32 * b + i];
                    ms = k.n0 * s0 + k.n1 * s1;
                }
                if (has_min) mn = mn + (k.wm * dx) * static_cast<float>(ms);
            }
            float y = acc;
            if (has_min) y = y - mn;
            job.y[t * job.ldy + r] = y;
        }
    }
}

}  // namespace strata::kq

namespace strata {

const char* int_path_name() { return kq::name(kq::active()); }

void force_int_path(std::string_view name) {
    if (name.empty()) {
        simd::force_vector_bits(0);
        return kq::force(-1);
    }
    for (int isa = 0; isa < kq::kIsaCount; ++isa)
        if (name == kq::name(static_cast<kq::Isa>(isa))) {
            const auto path = static_cast<kq::Isa>(isa);
            STRATA_CHECK(kq::available(path), "integer path '{}' is not available on this CPU (best: {})", name,
                         kq::name(kq::detected()));
            // The float kernels as a CPU with only this instruction set runs them.
            const bool narrow = path == kq::Isa::Avx2 || path == kq::Isa::AvxVnni;
            simd::force_vector_bits(path == kq::Isa::Scalar || (narrow && !simd::runs_vector_bits(256)) ? 128
                                    : narrow                                                        ? 256
                                                                                                    : 0);
            return kq::force(isa);
        }
    fail("unknown integer path '{}' (expected scalar, avx2, avx-vnni, avx512-vnni or amx)", name);
}

}  // namespace strata
