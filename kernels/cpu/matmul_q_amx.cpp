// The AMX path of the integer-dot matmul, for packed Q8_0, Q4_K, Q4_0 and IQ4_XS weights
// and windows of at least 16 tokens (the prompt): the tile unit computes each block's exact integer sums P for
// 16 tokens x 16 rows, and AVX-512 does the canonical float part of matmul_q.h, so the
// results are those of every other path, bit for bit (tests force each path).
//
// A packed block (matmul_q.h) is already an AMX B tile: 8 rows of 64 bytes, row k holding
// the 16 rows' four bytes of column k, as w + 128 (unsigned). The A tile is the window's
// 16 tokens x 32 bytes of one digit (signed); TDPBSUD gives C = sum x (w + 128) =
// sum w x + 128 S(x) per digit, so P = 128 C_q + C_r - 128 s_b, s_b the block's sum of
// 128 q + r (ActQ::s), exactly as the VNNI kernel's bias correction. The nibble formats
// are unpacked into a B tile in memory per block (amx_nibbles below).
//
// Enabled only when the CPU has AMX-TILE and AMX-INT8 and Linux grants the tile data
// state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). The tile configuration
// lives in static storage: GCC 12 has been seen dropping the stores of a configuration
// built on the stack before LDTILECFG reads it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <sys/syscall.h>
#include <unistd.h>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "kernels/cpu/matmul_q.h"

namespace strata::kq {
namespace {

struct alignas(64) TileConfig {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

// tmm0, tmm1: C of the two digits (16 tokens x 16 rows of int32) for the first group;
// tmm2, tmm3: A, the two digits of 16 tokens (32 bytes each); tmm4: B, one packed block
// (8 x 64 bytes) of the first group; tmm5: B of the second group; tmm6, tmm7: its C.
constexpr TileConfig make_config() {
    TileConfig c{};
    c.palette = 1;
    for (int i : {0, 1, 6, 7}) {
        c.colsb[i] = 64;
        c.rows[i] = 16;
    }
    c.colsb[2] = c.colsb[3] = 32;
    c.rows[2] = c.rows[3] = 16;
    c.colsb[4] = c.colsb[5] = 64;
    c.rows[4] = c.rows[5] = 8;
    return c;
}
alignas(64) constexpr TileConfig kConfig = make_config();  // static storage, not the stack

}  // namespace

bool amx_usable() {
    static const bool ok = [] {
#if defined(__x86_64__) && defined(__linux__)
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-int8") ||
            !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
            !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("f16c"))
            return false;
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
        return false;
#endif
    }();
    return ok;
}

}  // namespace strata::kq

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")  // the canonical order: a multiply, then an add
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*() (`__m512 __Y = __Y;`),
// which -Wmaybe-uninitialized reports at -O3 wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("amx-tile,amx-int8,avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq")
#include <immintrin.h>

namespace strata::kq {

// One group's block against the tokens' A tiles in tmm2 and tmm3 (loaded by the caller):
// C in tiles TC (digit q) and TC1 (digit r), B in tile TB from bt, the sums stored to cq
// and cr. A macro, not a function: the tile intrinsics take their tile numbers as
// literals (they are pasted into the assembly).
#define STRATA_AMX_GROUP_SUMS(TC, TC1, TB, bt, cq, cr) \
    do {                                               \
        _tile_zero(TC);                                \
        _tile_zero(TC1);                               \
        _tile_loadd(TB, bt, 64);                       \
        _tile_dpbsud(TC, 2, TB);                       \
        _tile_dpbsud(TC1, 3, TB);                      \
        _tile_stored(TC, cq, 64);                      \
        _tile_stored(TC1, cr, 64);                     \
    } while (0)

void amx_packed_q8(const Job& job, int64_t g, int64_t t0, int64_t r_end) {
    const ActQ& x = *job.x;
    const int64_t nb = x.nb;
    const auto* base = static_cast<const PackedQ8*>(job.w->packed) + g * nb;
    _tile_loadconfig(&kConfig);
    __m512 acc[16];
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    alignas(64) int32_t cq[16][16], cr[16][16];
    const int8_t* aq = x.qt(t0);
    const int8_t* ar = x.rt(t0);
    for (int64_t b = 0; b < nb; ++b) {
        const PackedQ8& p = base[b];
        _tile_loadd(2, aq + 32 * b, x.n);
        _tile_loadd(3, ar + 32 * b, x.n);
        STRATA_AMX_GROUP_SUMS(0, 1, 4, p.u, cq, cr);
        const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) {
            const __m512i c = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cq[t]), 7), _mm512_load_si512(cr[t]));
            const __m512i P = _mm512_sub_epi32(c, _mm512_set1_epi32(128 * x.st(t0 + t)[b]));
            const __m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(x.dt(t0 + t)[b]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(s, _mm512_cvtepi32_ps(P)));
        }
    }
    _tile_release();
    const int64_t r0 = g * kPackRows;
    const int nr = static_cast<int>(std::min<int64_t>(kPackRows, r_end - r0));
    for (int t = 0; t < 16; ++t)
        _mm512_mask_storeu_ps(job.y + (t0 + t) * job.ldy + r0, static_cast<__mmask16>((1u << nr) - 1), acc[t]);
}

// Two groups share each load of the tokens' A tiles (the eight tiles: two C per group,
// the two A, one B per group). Q8_0 pp512 went from 165 to 193 tok/s with it.
void amx_packed_q8_2(const Job& job, int64_t g, int64_t t0, int64_t r_end) {
    const ActQ& x = *job.x;
    const int64_t nb = x.nb;
    const auto* base0 = static_cast<const PackedQ8*>(job.w->packed) + g * nb;
    const auto* base1 = base0 + nb;
    _tile_loadconfig(&kConfig);
    __m512 acc[2][16];
    for (int t = 0; t < 16; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
    // C goes through memory; blocks alternate between two buffers so that a block's tile
    // stores never wait on the previous block's vector loads (3% in pp512).
    alignas(64) int32_t cqb[2][2][16][16], crb[2][2][16][16];
    const int8_t* aq = x.qt(t0);
    const int8_t* ar = x.rt(t0);
    for (int64_t b = 0; b < nb; ++b) {
        int32_t(*cq)[16][16] = cqb[b & 1];
        int32_t(*cr)[16][16] = crb[b & 1];
        const PackedQ8& p0 = base0[b];
        const PackedQ8& p1 = base1[b];
        _tile_loadd(2, aq + 32 * b, x.n);
        _tile_loadd(3, ar + 32 * b, x.n);
        STRATA_AMX_GROUP_SUMS(0, 1, 4, p0.u, cq[0], cr[0]);
        STRATA_AMX_GROUP_SUMS(6, 7, 5, p1.u, cq[1], cr[1]);
        const __m512 ws[2] = {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0.d))),
                              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1.d)))};
        for (int k = 0; k < 2; ++k) {
#pragma GCC unroll 16
            for (int t = 0; t < 16; ++t) {
                const __m512i c = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cq[k][t]), 7), _mm512_load_si512(cr[k][t]));
                const __m512i P = _mm512_sub_epi32(c, _mm512_set1_epi32(128 * x.st(t0 + t)[b]));
                const __m512 sc = _mm512_mul_ps(ws[k], _mm512_set1_ps(x.dt(t0 + t)[b]));
                acc[k][t] = _mm512_add_ps(acc[k][t], _mm512_mul_ps(sc, _mm512_cvtepi32_ps(P)));
            }
        }
    }
    _tile_release();
    for (int k = 0; k < 2; ++k) {
        const int64_t r0 = (g + k) * kPackRows;
        const int nr = static_cast<int>(std::min<int64_t>(kPackRows, r_end - r0));
        for (int t = 0; t < 16; ++t)
            _mm512_mask_storeu_ps(job.y + (t0 + t) * job.ldy + r0, static_cast<__mmask16>((1u << nr) - 1), acc[k][t]);
    }
}

// Packed Q4_K, Q4_0 and IQ4_XS, NG (1 or 2) groups for 16 tokens: each block's nibbles
// are unpacked into a B tile in memory (row c of a block holds its column c: the low
// nibbles of vector c for c < 4, the high ones for c >= 4, the packed layouts' order);
// Q4_K and Q4_0 as the unsigned nibbles, IQ4_XS through its codebook as w + 128. The
// integer sums P are then those of the VNNI kernels (packed_tile, packed_tile_q4k,
// packed_tile_k), and so is the float part.
enum class AmxK { Q4_K, Q4_0, IQ4_XS };

template <AmxK K, int NG>
void amx_nibbles(const Job& job, int64_t g, int64_t t0, int64_t r_end) {
    constexpr bool Q4K = K == AmxK::Q4_K, Q40 = K == AmxK::Q4_0;
    using Unit = std::conditional_t<Q4K, PackedQ4K, std::conditional_t<Q40, PackedQ40, PackedIQ4XS>>;
    constexpr int kBlocks = Q40 ? 1 : 8;  // blocks per unit
    const ActQ& x = *job.x;
    const int64_t nu = x.nb / kBlocks;  // units per group
    const auto* base = static_cast<const Unit*>(job.w->packed) + g * nu;
    _tile_loadconfig(&kConfig);
    __m512 acc[NG][16], mn[NG][16];
    for (int k = 0; k < NG; ++k)
        for (int t = 0; t < 16; ++t) acc[k][t] = mn[k][t] = _mm512_setzero_ps();
    alignas(64) int32_t cqb[2][NG][16][16], crb[2][NG][16][16];
    alignas(64) uint8_t bt[NG][8][64];
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i tbl = _mm512_loadu_si512(kIq4Biased.data());  // IQ4_XS
    const int8_t* aq = x.qt(t0);
    const int8_t* ar = x.rt(t0);
    for (int64_t su = 0; su < nu; ++su) {
        __m512 dv[NG], dmv[NG];  // the unit's rows' d (and Q4_K's dmin), once per unit
        for (int k = 0; k < NG; ++k) {
            const Unit& p = base[k * nu + su];
            dv[k] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.d)));
            if constexpr (Q4K) dmv[k] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.dmin)));
        }
        for (int j = 0; j < kBlocks; ++j) {
            const int64_t b = kBlocks * su + j;
            int32_t(*cq)[16][16] = cqb[b & 1];
            int32_t(*cr)[16][16] = crb[b & 1];
            for (int k = 0; k < NG; ++k) {
                const Unit& p = base[k * nu + su];
                for (int c = 0; c < 4; ++c) {
                    __m512i v;
                    if constexpr (Q40)
                        v = _mm512_loadu_si512(p.q[c]);
                    else
                        v = _mm512_loadu_si512(p.q[j][c]);
                    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    if constexpr (K == AmxK::IQ4_XS) {
                        lo = _mm512_shuffle_epi8(tbl, lo);
                        hi = _mm512_shuffle_epi8(tbl, hi);
                    }
                    _mm512_store_si512(bt[k][c], lo);
                    _mm512_store_si512(bt[k][c + 4], hi);
                }
            }
            _tile_loadd(2, aq + 32 * b, x.n);
            _tile_loadd(3, ar + 32 * b, x.n);
            STRATA_AMX_GROUP_SUMS(0, 1, 4, bt[0], cq[0], cr[0]);
            if constexpr (NG == 2) STRATA_AMX_GROUP_SUMS(6, 7, 5, bt[1], cq[1], cr[1]);
            for (int k = 0; k < NG; ++k) {
                const Unit& p = base[k * nu + su];
                // lane r: the block's scales as the VNNI kernels form them
                __m512 ws, wm = _mm512_setzero_ps();
                if constexpr (Q4K) {
                    ws = _mm512_mul_ps(dv[k], _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.sc[j])))));
                    wm = _mm512_mul_ps(dmv[k],
                                       _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.mn[j])))));
                } else if constexpr (Q40) {
                    ws = dv[k];
                } else {
                    const __m512i sl = _mm512_loadu_si512(p.sl);
                    const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.sh)));
                    const __m512i ls = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF)),
                                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
                    ws = _mm512_mul_ps(dv[k], _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
                }
#pragma GCC unroll 16
                for (int t = 0; t < 16; ++t) {
                    __m512i P = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cq[k][t]), 7), _mm512_load_si512(cr[k][t]));
                    if constexpr (Q40) P = _mm512_sub_epi32(P, _mm512_set1_epi32(8 * x.st(t0 + t)[b]));
                    if constexpr (K == AmxK::IQ4_XS) P = _mm512_sub_epi32(P, _mm512_set1_epi32(128 * x.st(t0 + t)[b]));
                    const __m512 dx = _mm512_set1_ps(x.dt(t0 + t)[b]);
                    if constexpr (Q4K)
                        mn[k][t] = _mm512_add_ps(mn[k][t], _mm512_mul_ps(_mm512_mul_ps(wm, dx),
                                                                         _mm512_set1_ps(static_cast<float>(x.st(t0 + t)[b]))));
                    acc[k][t] = _mm512_add_ps(acc[k][t], _mm512_mul_ps(_mm512_mul_ps(ws, dx), _mm512_cvtepi32_ps(P)));
                }
            }
        }
    }
    _tile_release();
    for (int k = 0; k < NG; ++k) {
        const int64_t r0 = (g + k) * kPackRows;
        const int nr = static_cast<int>(std::min<int64_t>(kPackRows, r_end - r0));
        for (int t = 0; t < 16; ++t)
            _mm512_mask_storeu_ps(job.y + (t0 + t) * job.ldy + r0, static_cast<__mmask16>((1u << nr) - 1),
                                  Q4K ? _mm512_sub_ps(acc[k][t], mn[k][t]) : acc[k][t]);
    }
}

void amx_packed_nibbles(const Job& job, int64_t g, int64_t t0, int64_t r_end, int n_groups) {
    switch (job.w->type) {
    case GgmlType::Q4_K: return n_groups == 2 ? amx_nibbles<AmxK::Q4_K, 2>(job, g, t0, r_end) : amx_nibbles<AmxK::Q4_K, 1>(job, g, t0, r_end);
    case GgmlType::Q4_0: return n_groups == 2 ? amx_nibbles<AmxK::Q4_0, 2>(job, g, t0, r_end) : amx_nibbles<AmxK::Q4_0, 1>(job, g, t0, r_end);
    case GgmlType::IQ4_XS:
        return n_groups == 2 ? amx_nibbles<AmxK::IQ4_XS, 2>(job, g, t0, r_end) : amx_nibbles<AmxK::IQ4_XS, 1>(job, g, t0, r_end);
    default: fail("amx: type {} has no nibble kernel", type_info(job.w->type).name);
    }
}

#undef STRATA_AMX_GROUP_SUMS

}  // namespace strata::kq

#pragma GCC pop_options
