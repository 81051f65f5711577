// Internal to kernels/cpu: matrix products of quantized weights with quantized
// activations (act_quant.h) by integer dot products, for every quantized weight type (Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K .. Q6_K, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ1_S, IQ1_M). Four implementations (scalar, AVX2, AVX-VNNI, AVX-512 VNNI)
// compute the same floats; see "Integer dot products" in docs/architecture.md.
//
// Canonical computation of y[t][r] (every path does exactly this, in this order). For
// each 32-value block b of the row, in index order, the weight block is decoded to 32
// signed integers w and a float scale ws, and for some types integer sub-scales m0, m1
// of its two 16-value halves (1 otherwise) or a float minimum wm:
//   Q8_0 the bytes; Q4_0 nibble - 8; Q5_0 five bits - 16; IQ4_NL the codebook's value;
//   Q4_1, Q5_1 the unsigned nibble or five bits, wm = -m (the negated block minimum, so
//     that y = acc - mn below adds it);
//   Q4_K, Q5_K the unsigned 4 or 5 bits (Q5_K: bit j of qh as bit 4), ws = d * sc,
//     wm = dmin * mn;
//   Q2_K w in [0, 3], m0, m1 its halves' 4-bit scales, ws = d, wm = dmin, and the
//     halves' 4-bit minimums n0, n1; Q3_K w in [-4, 3], Q6_K w in [-32, 31], m0, m1
//     their signed 16-value scales, ws = d;
//   IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS the signed codebook or grid values, ws from the
//     block's scale; IQ2_XS, IQ2_S the same with m0, m1 = 2 s + 1 of the halves'
//     4-bit scales and ws = d / 8;
//   IQ1_S / IQ1_M: w = 8 g + shift (g in {-1, 0, 1} from iq1s_grid, shift = +-1 for
//     ggml's delta +-1/8), so w is in [-9, 9] and ws carries the 1/8: IQ1_S ws =
//     (d * float(2s + 1)) * 0.125f, IQ1_M ws = d * 0.125f with m0, m1 = 2s + 1 of the
//     block's two halves (|P| <= 2 * 16 * 9 * 16320 * 15 < 2^31).
// The products with the activation's two-digit integers x = 128 q + r are exact integers
// on every path, and s = ws * d_x[b].
//
// Every type sums each block in one exact int32 (per-block sums):
//   P = m0 * sum_{i<16} w[i] x[i] + m1 * sum_{i>=16} w[i] x[i]  (exact int32: |x| <=
//   127 * 128 + 64 = 16320, so |P| <= 2 * 128 * 16 * 32 * 16320 = 2139095040 < 2^31 for
//   Q6_K, whose w is in [-32, 31] and m in [-128, 127], the largest case), then
//   acc = acc + s * float(P) (a multiply then an add, never fused), acc starting at 0,
//   and for Q4_K, Q5_K, Q4_1, Q5_1  mn = mn + (wm * d_x[b]) * float(sum_x[b]),
//   for Q2_K            mn = mn + (wm * d_x[b]) * float(n0 S0 + n1 S1) with S0, S1 the
//                       exact sums of x over the block's two halves (|.| < 2^24);
//   y = acc [- mn for them].
//   One sum per block lets a vector hold 16 rows (the packed layouts below) or 16
//   tokens, so the float work is one operation per 16 products of blocks.
//
// Packed Q8_0 (pack_weights): rows in groups of 16, the last group padded with zero rows.
// Group g, block b is the 544-byte PackedQ8 at index g * nb + b: the 16 rows' fp16 scales,
// then value i of row j as u[i / 4][j][i % 4] = w + 128 (unsigned). A group's blocks are
// contiguous, so a task streams one run of memory per group.
// Packed Q4_0: the same grouping, one 288-byte PackedQ40 per block: the 16 rows' fp16
// scales, then four 64-byte vectors: vector c holds, for row r, the block's bytes
// qs[4c + i], i < 4 (low nibbles: values 4c + i, column c; high nibbles: values 16 + 4c + i,
// column c + 4); a value is its nibble - 8.
// Packed IQ4_NL: Q4_0's layout (PackedQ40), the nibbles indexing kValuesIq4nl.
// Packed Q5_0, Q4_1, Q5_1 (as many bytes as the rows): Q4_0's layout, with the blocks'
// fp16 minimums after the scales (Q4_1, Q5_1) and the values' bit 4 after the nibbles as
// one 64-byte vector (Q5_0, Q5_1: byte i of row r holds at bit c the bit 4 of value
// 4c + i, and at bit c + 4 that of value 16 + 4c + i, the nibbles' order).
// Packed Q4_K: the same grouping by 16 rows, one 2368-byte PackedQ4K per super-block of
// 256 values: the rows' fp16 d and dmin, their eight 6-bit scales and minimums as bytes
// ([block][row]), then block j's 32 values of the 16 rows as four 64-byte vectors:
// vector k holds, for row r, bytes q[32j + 4k + i] | q[32j + 4(k + 4) + i] << 4, i < 4 (the
// low nibbles are four-value column k, the high nibbles column k + 4).
// Packed Q3_K: the same grouping, one 1824-byte PackedQ3K per super-block (3.6% more than
// the rows' 1760): the rows' fp16 d, their sixteen signed sub-scales ([sub-block][row]),
// then per block the values u = w + 4 (0..7) as two planes: the low two bits as Q6_K's
// high bits are laid out (lo[j][h][r][i], bits 2c..2c+1: value 4 (4h + c) + i) and bit 2
// as Q5_K's bit plane (hb[j][r][i], bit c: value 4c + i).
// Packed Q2_K: the same grouping, one 1344-byte PackedQ2K per super-block (as many bytes
// as the rows' block_q2_K): the rows' fp16 d and dmin, their sixteen scale bytes
// ([sub-block][row]: sub-scale | sub-minimum << 4, the format's own bytes), then per block
// the values' two bits laid out as Packed Q3_K's lo planes.
// Packed Q5_K: Q4_K's layout (the low four bits of each value as its nibbles), then per
// block the values' bit 4 as one 64-byte vector: byte i of row r holds at bit c the bit 4
// of value 4c + i (2880 bytes per super-block of 16 rows, 2% more than the rows' 2816).
// Packed Q6_K: the same grouping, one 3360-byte PackedQ6K per super-block (as many bytes as
// the 16 rows' block_q6_K): the rows' fp16 d, their sixteen sub-scales ([sub-block][row]),
// then for block j the low four bits of its values as Q4_K's nibbles are laid out
// (lo[j][k][r][i]: value 4k + i in the low nibble, value 4(k + 4) + i in the high one) and
// the high two bits as two 64-byte vectors: hi[j][h][r][i] holds, at bits 2c..2c+1, the
// high bits of value 4(4h + c) + i (columns 4h .. 4h + 3). A value is its six bits - 32.
// Packed IQ4_XS: the same grouping, one 2176-byte PackedIQ4XS per super-block (as many
// bytes as the rows' block_iq4_xs): the rows' fp16 d, their scales_h, their four
// scales_l bytes as one little-endian word (block j's 6-bit scale is bits 4j..4j+3 of
// that word | bits 2j..2j+1 of scales_h << 4, minus 32), then the nibble indices into
// kValuesIq4nl laid out as Q4_K's nibbles.
// Packed IQ3_XXS: the same grouping, one 1632-byte PackedIQ3XXS per super-block (4% more
// than the rows' 1568: the sign of every value is stored, where the format keeps 7 of
// each 8 and a parity rule): the rows' fp16 d, their eight 4-bit block scales as one
// word (block j: bits 4j..4j+3), for each block and row the 32 values' signs as one word
// (bit i: value i is negative), and the grid indices ([block][column][row]: column c
// is the grid entry of values 4c .. 4c + 3).
// Packed IQ2_XXS: IQ3_XXS's form for 8-value grid entries, one 1120-byte PackedIQ2XXS per
// super-block (6% more than the rows' 1056): the rows' fp16 d, their eight 4-bit block
// scales as one word, each block's 32 signs per row as one word, and the grid indices
// ([block][group][row]: group l is the grid entry of values 8l .. 8l + 7).
// Packed IQ3_S: IQ3_XXS's layout with the grid indices' ninth bits, one 1760-byte
// PackedIQ3S per super-block (as many bytes as the rows): the rows' fp16 d, their eight
// 4-bit block scales as one word, each block's 32 signs per row as one word, the ninth
// bits ([block][row]: bit c for column c) and the indices' low bytes
// ([block][column][row]).
// Packed IQ2_XS and IQ2_S (as many bytes as the rows): the rows' fp16 d, their scale
// bytes ([block][row]: the two halves' 4-bit scales), then per block and 8-value group the
// rows' indices ([block][group][row]): IQ2_XS's 16-bit words as stored (9-bit grid index,
// 7-bit sign index); IQ2_S's low index bytes, then its rows' qh bytes ([block][row]: bits
// 2l..2l+1 = bits 8-9 of group l's index) and sign bytes ([block][group][row]).
// Packed IQ1_S (as many bytes as the rows): the rows' fp16 d, their qh words
// ([block][row]: the groups' high index bits, the scale, the shift's sign), the index
// bytes ([block][group][row]). Packed IQ1_M (928 bytes, 3.6% above the rows): the rows'
// fp16 super-scales, the halves' 3-bit scales as one byte ([block][row]: s0 | s1 << 3),
// the qh bytes ([block][k][row]: byte 2 j + k of the format, groups 2k and 2k + 1) and
// the index bytes.
#pragma once
#include <array>
#include <cstdint>

#include "engine/quant/blocks.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul.h"

namespace strata::kq {

// AvxVnni: the AVX2 kernels with AVX-VNNI's 256-bit vpdpbusd for their integer sums
// (CPUs with AVX-VNNI but no AVX-512, such as Intel's client cores since Alder Lake).
// Amx: Avx512Vnni, plus AMX tiles for packed Q8_0, Q4_K, Q4_0 and IQ4_XS in windows of
// 16 tokens or more.
enum class Isa : int { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512Vnni = 3, Amx = 4 };
constexpr int kIsaCount = 5;

bool supported(GgmlType t);
Isa detected();          // the best path this CPU runs
bool available(Isa isa); // whether this CPU runs it (an AVX-512 CPU may lack AVX-VNNI)
Isa active();            // detected(), unless forced
bool forced();           // whether a path is forced
// Tests: force a path (must be available), or -1 to go back to detection.
void force(int isa);
const char* name(Isa isa);

// IQ4_NL's table as w + 128 (unsigned bytes), for the biased VNNI form and AMX, four
// times over (one copy per 128-bit lane of a vpshufb).
inline constexpr std::array<uint8_t, 64> kIq4Biased = [] {
    std::array<uint8_t, 64> a{};
    for (int i = 0; i < 64; ++i) a[static_cast<size_t>(i)] = static_cast<uint8_t>(kValuesIq4nl[i % 16] + 128);
    return a;
}();

struct PackedQ8 {
    uint16_t d[16];
    uint8_t u[8][16][4];
};
static_assert(sizeof(PackedQ8) == 544);
struct PackedQ40 {
    uint16_t d[16];
    uint8_t q[4][16][4];  // [vector c][row][i]
};
static_assert(sizeof(PackedQ40) == 288);
struct PackedQ50 {
    uint16_t d[16];
    uint8_t q[4][16][4];
    uint8_t hb[16][4];  // [row][i]: bit c = bit 4 of value 4c + i, bit c + 4 of value 16 + 4c + i
};
static_assert(sizeof(PackedQ50) == 16 * sizeof(block_q5_0));
struct PackedQ41 {
    uint16_t d[16], m[16];
    uint8_t q[4][16][4];
};
static_assert(sizeof(PackedQ41) == 16 * sizeof(block_q4_1));
struct PackedQ51 {
    uint16_t d[16], m[16];
    uint8_t q[4][16][4];
    uint8_t hb[16][4];
};
static_assert(sizeof(PackedQ51) == 16 * sizeof(block_q5_1));
struct PackedQ4K {
    uint16_t d[16], dmin[16];
    uint8_t sc[8][16], mn[8][16];
    uint8_t q[8][4][16][4];  // [block][k][row][i]
};
static_assert(sizeof(PackedQ4K) == 2368);
struct PackedQ3K {  // see the top of this file
    uint16_t d[16];
    int8_t sc[16][16];        // [sub-block][row]
    uint8_t lo[8][2][16][4];  // [block][h][row][i]: bits 2c..2c+1 = bits 0-1 of value 4 (4h + c) + i
    uint8_t hb[8][16][4];     // [block][row][i]: bit c = bit 2 of value 4c + i
};
static_assert(sizeof(PackedQ3K) == 1824);
struct PackedQ2K {  // see the top of this file
    uint16_t d[16], dmin[16];
    uint8_t sc[16][16];       // [sub-block][row]: scale | min << 4
    uint8_t lo[8][2][16][4];  // [block][h][row][i]: bits 2c..2c+1 = value 4 (4h + c) + i
};
static_assert(sizeof(PackedQ2K) == 16 * sizeof(block_q2_K));
struct PackedQ5K {  // PackedQ4K, then the values' bit 4 (see the top of this file)
    uint16_t d[16], dmin[16];
    uint8_t sc[8][16], mn[8][16];
    uint8_t q[8][4][16][4];   // [block][k][row][i]
    uint8_t hb[8][16][4];     // [block][row][i]: bit c = bit 4 of value 4c + i
};
static_assert(sizeof(PackedQ5K) == 2880);
struct PackedQ6K {
    uint16_t d[16];
    int8_t sc[16][16];            // [sub-block][row]
    uint8_t lo[8][4][16][4];      // [block][k][row][i]
    uint8_t hi[8][2][16][4];      // [block][h][row][i]
};
static_assert(sizeof(PackedQ6K) == 16 * sizeof(block_q6_K));
struct PackedIQ4XS {
    uint16_t d[16], sh[16];
    uint32_t sl[16];
    uint8_t q[8][4][16][4];  // [block][k][row][i]
};
static_assert(sizeof(PackedIQ4XS) == 16 * sizeof(block_iq4_xs));
struct PackedIQ3XXS {
    uint16_t d[16];
    uint32_t sc[16];
    uint32_t sg[8][16];   // [block][row]
    uint8_t q[8][8][16];  // [block][column][row]
};
static_assert(sizeof(PackedIQ3XXS) == 1632);
struct PackedIQ2XXS {
    uint16_t d[16];
    uint32_t sc[16];
    uint32_t sg[8][16];   // [block][row]
    uint8_t q[8][4][16];  // [block][group][row]
};
static_assert(sizeof(PackedIQ2XXS) == 1120);
struct PackedIQ3S {
    uint16_t d[16];
    uint32_t sc[16];
    uint32_t sg[8][16];   // [block][row]
    uint8_t qh[8][16];    // [block][row]: bit c = bit 8 of column c's index
    uint8_t q[8][8][16];  // [block][column][row]
};
static_assert(sizeof(PackedIQ3S) == 16 * sizeof(block_iq3_s));
struct PackedIQ2XS {
    uint16_t d[16];
    uint8_t sc[8][16];     // [block][row]
    uint16_t q[8][4][16];  // [block][group][row]: index | sign index << 9
};
static_assert(sizeof(PackedIQ2XS) == 16 * sizeof(block_iq2_xs));
struct PackedIQ2S {
    uint16_t d[16];
    uint8_t sc[8][16];      // [block][row]
    uint8_t q[8][4][16];    // [block][group][row]: low byte of the index
    uint8_t qh[8][16];      // [block][row]: bits 2l..2l+1 = bits 8-9 of group l's index
    uint8_t sg[8][4][16];   // [block][group][row]: the group's eight signs
};
static_assert(sizeof(PackedIQ2S) == 16 * sizeof(block_iq2_s));
struct PackedIQ1S {
    uint16_t d[16];
    uint16_t qh[8][16];   // [block][row]
    uint8_t q[8][4][16];  // [block][group][row]
};
static_assert(sizeof(PackedIQ1S) == 16 * sizeof(block_iq1_s));
struct PackedIQ1M {
    uint16_t d[16];
    uint8_t sc[8][16];     // [block][row]: s0 | s1 << 3
    uint8_t qh[8][2][16];  // [block][k][row]
    uint8_t q[8][4][16];   // [block][group][row]
};
static_assert(sizeof(PackedIQ1M) == 928);
constexpr int kPackRows = 16;

struct Job {
    const MatView* w;
    const ActQ* x;
    float* y;  // [x->T, ldy]
    int64_t ldy;
};

// Q4_K: the 6-bit scale and minimum of block j (0..7) of a super-block's 12 scale bytes.
inline void q4k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q3_K: the signed 6-bit scale of 16-value sub-block s (0..15) of a super-block's 12 bytes.
inline int q3k_scale(const uint8_t* sc, int s) {
    const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
    const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// Rows [r0, r1) for every token of the job. With w->packed set, r0 is a multiple of
// kPackRows and r1 is too unless it is n_out.
void rows_scalar(const Job& job, int64_t r0, int64_t r1);
void rows_avx2(const Job& job, int64_t r0, int64_t r1);
void rows_avxvnni(const Job& job, int64_t r0, int64_t r1);
void rows_avx512(const Job& job, int64_t r0, int64_t r1);
// Packed IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS and IQ2_S with AVX-512 VBMI (matmul_q_avx512vbmi.cpp);
// rows_avx512 calls it where vbmi_usable().
bool vbmi_usable();
// Tests: off makes vbmi_usable() false, so packed IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS and IQ2_S take the gather form that
// AVX-512 CPUs without VBMI run (on by default).
void allow_vbmi(bool on);
void rows_grid_vbmi(const Job& job, int64_t r0, int64_t r1);

// AMX (matmul_q_amx.cpp): whether this CPU and OS run it (asks Linux for the tile state
// once), and packed Q8_0 group g for tokens [t0, t0 + 16).
bool amx_usable();
void amx_packed_q8(const Job& job, int64_t g, int64_t t0, int64_t r_end);
// Groups g and g + 1 (both with rows below r_end) at once: one load of the tokens' tiles
// for both.
void amx_packed_q8_2(const Job& job, int64_t g, int64_t t0, int64_t r_end);
// Packed Q4_K, Q4_0 and IQ4_XS (their nibbles unpacked into tiles): n_groups (1 or 2)
// groups from g.
void amx_packed_nibbles(const Job& job, int64_t g, int64_t t0, int64_t r_end, int n_groups);

}  // namespace strata::kq
