// Packing at load time (matmul.h: packed_size, pack_weights): each integer-path type's
// rows rearranged into the packed layout of matmul_q.h, 16 rows per group.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cpu/matmul_q.h"

namespace strata {

size_t packed_size(const MatView& w) {
    const int64_t groups = (w.n_out + kq::kPackRows - 1) / kq::kPackRows;
    switch (w.type) {
    case GgmlType::Q8_0: return static_cast<size_t>(groups * (w.n_in / 32)) * sizeof(kq::PackedQ8);
    case GgmlType::Q4_0:
    case GgmlType::IQ4_NL: return static_cast<size_t>(groups * (w.n_in / 32)) * sizeof(kq::PackedQ40);
    case GgmlType::Q4_1: return static_cast<size_t>(groups * (w.n_in / 32)) * sizeof(kq::PackedQ41);
    case GgmlType::Q5_0: return static_cast<size_t>(groups * (w.n_in / 32)) * sizeof(kq::PackedQ50);
    case GgmlType::Q5_1: return static_cast<size_t>(groups * (w.n_in / 32)) * sizeof(kq::PackedQ51);
    case GgmlType::Q4_K: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedQ4K);
    case GgmlType::Q2_K: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedQ2K);
    case GgmlType::Q3_K: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedQ3K);
    case GgmlType::Q5_K: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedQ5K);
    case GgmlType::Q6_K: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedQ6K);
    case GgmlType::IQ4_XS: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ4XS);
    case GgmlType::IQ3_XXS: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ3XXS);
    case GgmlType::IQ2_XXS: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ2XXS);
    case GgmlType::IQ3_S: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ3S);
    case GgmlType::IQ2_XS: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ2XS);
    case GgmlType::IQ2_S: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ2S);
    case GgmlType::IQ1_S: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ1S);
    case GgmlType::IQ1_M: return static_cast<size_t>(groups * (w.n_in / 256)) * sizeof(kq::PackedIQ1M);
    default: return 0;
    }
}

namespace {

// Groups [g0, g1) of pack_weights, n packed units (blocks or super-blocks) per group:
// each unit starts as `pad` (what a padding row holds), then put(unit, j, block) packs
// row j's block into it.
template <class P, class Block, class F>
void pack_units(const MatView& w, void* dst, int64_t g0, int64_t g1, int64_t n, const P& pad, F&& put) {
    auto* out = static_cast<P*>(dst);
    for (int64_t g = g0; g < g1; ++g)
        for (int64_t i = 0; i < n; ++i) {
            P& p = out[g * n + i];
            p = pad;
            for (int j = 0; j < kq::kPackRows; ++j) {
                const int64_t r = g * kq::kPackRows + j;
                if (r < w.n_out) put(p, j, reinterpret_cast<const Block*>(w.row(r))[i]);
            }
        }
}

// Row j of a packed Q4_K super-block (or of Q5_K's, which has the same fields): its d,
// dmin, unpacked scales and minimums, and the low four bits of its values as nibbles.
template <class P, class B>
void pack_q4k_row(P& p, int j, const B& x) {
    p.d[j] = x.d;
    p.dmin[j] = x.dmin;
    for (int blk = 0; blk < 8; ++blk) {
        int sc, mn;
        kq::q4k_scale_min(x.scales, blk, &sc, &mn);
        p.sc[blk][j] = static_cast<uint8_t>(sc);
        p.mn[blk][j] = static_cast<uint8_t>(mn);
        // value l of the block: low nibble of qs[32 (blk / 2) + l] for even blk, high for odd
        auto val = [&](int l) {
            const uint8_t q = x.qs[32 * (blk / 2) + l];
            return blk % 2 ? q >> 4 : q & 0xF;
        };
        for (int k = 0; k < 4; ++k)
            for (int i = 0; i < 4; ++i)
                p.q[blk][k][j][i] = static_cast<uint8_t>(val(4 * k + i) | val(4 * (k + 4) + i) << 4);
    }
}

// Row j of a 32-value block laid out as packed Q4_0 (its d and nibbles): Q4_0, IQ4_NL,
// Q4_1, and the low bits of Q5_0 and Q5_1.
template <class P, class B>
void pack_nibble_row(P& p, int j, const B& x) {
    p.d[j] = x.d;
    for (int c = 0; c < 4; ++c) std::memcpy(p.q[c][j], x.qs + 4 * c, 4);
}

// Q5_0 / Q5_1: the nibbles, and bit 4 of value 4c + i (c < 8: column c) as bit c of
// hb[j][i] (matmul_q.h).
template <class P, class B>
void pack_q5_row(P& p, int j, const B& x) {
    pack_nibble_row(p, j, x);
    uint32_t qh;
    std::memcpy(&qh, x.qh, 4);
    for (int i = 0; i < 4; ++i) {
        uint8_t h = 0;
        for (int c = 0; c < 8; ++c) h |= static_cast<uint8_t>(((qh >> (4 * c + i)) & 1) << c);
        p.hb[j][i] = h;
    }
}

void pack_groups(const MatView& w, void* dst, int64_t g0, int64_t g1) {
    if (w.type == GgmlType::Q8_0) {
        kq::PackedQ8 pad{};  // zero scale, zero weights (u = w + 128)
        std::memset(pad.u, 128, sizeof pad.u);
        return pack_units<kq::PackedQ8, block_q8_0>(w, dst, g0, g1, w.n_in / 32, pad,
                                                    [](kq::PackedQ8& p, int j, const block_q8_0& x) {
            p.d[j] = x.d;
            for (int k = 0; k < 8; ++k) {  // four bytes at a time; q + 128 = q ^ 0x80 on a byte
                uint32_t v;
                std::memcpy(&v, x.qs + 4 * k, 4);
                v ^= 0x80808080u;
                std::memcpy(p.u[k][j], &v, 4);
            }
        });
    }
    if (w.type == GgmlType::Q4_0)
        return pack_units<kq::PackedQ40, block_q4_0>(w, dst, g0, g1, w.n_in / 32, kq::PackedQ40{},
                                                     [](kq::PackedQ40& p, int j, const block_q4_0& x) { pack_nibble_row(p, j, x); });
    if (w.type == GgmlType::IQ4_NL)
        return pack_units<kq::PackedQ40, block_iq4_nl>(w, dst, g0, g1, w.n_in / 32, kq::PackedQ40{},
                                                       [](kq::PackedQ40& p, int j, const block_iq4_nl& x) { pack_nibble_row(p, j, x); });
    if (w.type == GgmlType::Q4_1)
        return pack_units<kq::PackedQ41, block_q4_1>(w, dst, g0, g1, w.n_in / 32, kq::PackedQ41{},
                                                     [](kq::PackedQ41& p, int j, const block_q4_1& x) {
            pack_nibble_row(p, j, x);
            p.m[j] = x.m;
        });
    if (w.type == GgmlType::Q5_0)
        return pack_units<kq::PackedQ50, block_q5_0>(w, dst, g0, g1, w.n_in / 32, kq::PackedQ50{},
                                                     [](kq::PackedQ50& p, int j, const block_q5_0& x) { pack_q5_row(p, j, x); });
    if (w.type == GgmlType::Q5_1)
        return pack_units<kq::PackedQ51, block_q5_1>(w, dst, g0, g1, w.n_in / 32, kq::PackedQ51{},
                                                     [](kq::PackedQ51& p, int j, const block_q5_1& x) {
            pack_q5_row(p, j, x);
            p.m[j] = x.m;
        });
    if (w.type == GgmlType::Q6_K)
        return pack_units<kq::PackedQ6K, block_q6_K>(w, dst, g0, g1, w.n_in / 256, kq::PackedQ6K{},
                                                     [](kq::PackedQ6K& p, int j, const block_q6_K& x) {
            p.d[j] = x.d;
            for (int sub = 0; sub < 16; ++sub) p.sc[sub][j] = x.scales[sub];
            for (int blk = 0; blk < 8; ++blk) {
                // value l of block blk: ggml's 128-value halves, each four 32-value quarters
                const int h = blk / 4, c = blk % 4;
                auto lo = [&](int l) {
                    const uint8_t q = x.ql[64 * h + 32 * (c % 2) + l];
                    return c < 2 ? q & 0xF : q >> 4;
                };
                auto hi = [&](int l) { return (x.qh[32 * h + l] >> (2 * c)) & 3; };
                for (int k = 0; k < 4; ++k)
                    for (int i = 0; i < 4; ++i) {
                        p.lo[blk][k][j][i] = static_cast<uint8_t>(lo(4 * k + i) | lo(4 * (k + 4) + i) << 4);
                        p.hi[blk][0][j][i] |= static_cast<uint8_t>(hi(4 * k + i) << (2 * k));
                        p.hi[blk][1][j][i] |= static_cast<uint8_t>(hi(4 * (k + 4) + i) << (2 * k));
                    }
            }
        });
    if (w.type == GgmlType::IQ4_XS)
        return pack_units<kq::PackedIQ4XS, block_iq4_xs>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ4XS{},
                                                         [](kq::PackedIQ4XS& p, int j, const block_iq4_xs& x) {
            p.d[j] = x.d;
            p.sh[j] = x.scales_h;
            std::memcpy(&p.sl[j], x.scales_l, 4);
            for (int blk = 0; blk < 8; ++blk)
                for (int k = 0; k < 4; ++k)
                    std::memcpy(p.q[blk][k][j], x.qs + 16 * blk + 4 * k, 4);
        });
    if (w.type == GgmlType::IQ3_XXS)
        return pack_units<kq::PackedIQ3XXS, block_iq3_xxs>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ3XXS{},
                                                           [](kq::PackedIQ3XXS& p, int j, const block_iq3_xxs& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                uint32_t aux;
                std::memcpy(&aux, x.qs + 64 + 4 * blk, 4);
                p.sc[j] |= (aux >> 28) << (4 * blk);
                uint32_t sg = 0;
                for (int g = 0; g < 8; ++g) {
                    sg |= ((iq::kSignsIq2xs[(aux >> (7 * (g / 2))) & 127] >> (4 * (g % 2))) & 0xFu) << (4 * g);
                    p.q[blk][g][j] = x.qs[8 * blk + g];
                }
                p.sg[blk][j] = sg;
            }
        });
    if (w.type == GgmlType::IQ1_S)
        return pack_units<kq::PackedIQ1S, block_iq1_s>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ1S{},
                                                       [](kq::PackedIQ1S& p, int j, const block_iq1_s& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                p.qh[blk][j] = x.qh[blk];
                for (int g = 0; g < 4; ++g) p.q[blk][g][j] = x.qs[4 * blk + g];
            }
        });
    if (w.type == GgmlType::IQ1_M)
        return pack_units<kq::PackedIQ1M, block_iq1_m>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ1M{},
                                                       [](kq::PackedIQ1M& p, int j, const block_iq1_m& x) {
            p.d[j] = iq1m_scale_bits(x);
            uint16_t sc[4];
            std::memcpy(sc, x.scales, 8);
            for (int blk = 0; blk < 8; ++blk) {
                p.sc[blk][j] = static_cast<uint8_t>((sc[blk / 2] >> (6 * (blk % 2))) & 63);
                for (int k = 0; k < 2; ++k) p.qh[blk][k][j] = x.qh[2 * blk + k];
                for (int g = 0; g < 4; ++g) p.q[blk][g][j] = x.qs[4 * blk + g];
            }
        });
    if (w.type == GgmlType::IQ2_XS)
        return pack_units<kq::PackedIQ2XS, block_iq2_xs>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ2XS{},
                                                         [](kq::PackedIQ2XS& p, int j, const block_iq2_xs& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                p.sc[blk][j] = x.scales[blk];
                for (int g = 0; g < 4; ++g) p.q[blk][g][j] = x.qs[4 * blk + g];
            }
        });
    if (w.type == GgmlType::IQ2_S)
        return pack_units<kq::PackedIQ2S, block_iq2_s>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ2S{},
                                                       [](kq::PackedIQ2S& p, int j, const block_iq2_s& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                p.sc[blk][j] = x.scales[blk];
                p.qh[blk][j] = x.qh[blk];
                for (int g = 0; g < 4; ++g) {
                    p.q[blk][g][j] = x.qs[4 * blk + g];
                    p.sg[blk][g][j] = x.qs[32 + 4 * blk + g];
                }
            }
        });
    if (w.type == GgmlType::IQ3_S)
        return pack_units<kq::PackedIQ3S, block_iq3_s>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ3S{},
                                                       [](kq::PackedIQ3S& p, int j, const block_iq3_s& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                p.sc[j] |= uint32_t{(x.scales[blk / 2] >> (4 * (blk % 2))) & 0xFu} << (4 * blk);
                std::memcpy(&p.sg[blk][j], x.signs + 4 * blk, 4);  // bit 8 l + v: value 8 l + v
                p.qh[blk][j] = x.qh[blk];
                for (int c = 0; c < 8; ++c) p.q[blk][c][j] = x.qs[8 * blk + c];
            }
        });
    if (w.type == GgmlType::IQ2_XXS)
        return pack_units<kq::PackedIQ2XXS, block_iq2_xxs>(w, dst, g0, g1, w.n_in / 256, kq::PackedIQ2XXS{},
                                                           [](kq::PackedIQ2XXS& p, int j, const block_iq2_xxs& x) {
            p.d[j] = x.d;
            for (int blk = 0; blk < 8; ++blk) {
                uint32_t aux;
                std::memcpy(&aux, x.qs + 8 * blk + 4, 4);
                p.sc[j] |= (aux >> 28) << (4 * blk);
                uint32_t sg = 0;
                for (int g = 0; g < 4; ++g) {
                    sg |= uint32_t{iq::kSignsIq2xs[(aux >> (7 * g)) & 127]} << (8 * g);
                    p.q[blk][g][j] = x.qs[8 * blk + g];
                }
                p.sg[blk][j] = sg;
            }
        });
    if (w.type == GgmlType::Q2_K)
        return pack_units<kq::PackedQ2K, block_q2_K>(w, dst, g0, g1, w.n_in / 256, kq::PackedQ2K{},
                                                     [](kq::PackedQ2K& p, int j, const block_q2_K& x) {
            p.d[j] = x.d;
            p.dmin[j] = x.dmin;
            for (int s = 0; s < 16; ++s) p.sc[s][j] = x.scales[s];
            for (int blk = 0; blk < 8; ++blk) {
                const int h = blk / 4, cq = blk % 4;
                for (int l = 0; l < 32; ++l) {
                    const int c = l / 4, i = l % 4;
                    p.lo[blk][c / 4][j][i] |= static_cast<uint8_t>(((x.qs[32 * h + l] >> (2 * cq)) & 3) << (2 * (c % 4)));
                }
            }
        });
    if (w.type == GgmlType::Q3_K)
        return pack_units<kq::PackedQ3K, block_q3_K>(w, dst, g0, g1, w.n_in / 256, kq::PackedQ3K{},
                                                     [](kq::PackedQ3K& p, int j, const block_q3_K& x) {
            p.d[j] = x.d;
            for (int s = 0; s < 16; ++s) p.sc[s][j] = static_cast<int8_t>(kq::q3k_scale(x.scales, s));
            for (int blk = 0; blk < 8; ++blk) {
                const int h = blk / 4, cq = blk % 4;
                for (int l = 0; l < 32; ++l) {  // u = w + 4: two bits of qs, and the hmask bit as bit 2
                    const int lo = (x.qs[32 * h + l] >> (2 * cq)) & 3, hi = (x.hmask[l] >> (4 * h + cq)) & 1;
                    const int c = l / 4, i = l % 4;
                    p.lo[blk][c / 4][j][i] |= static_cast<uint8_t>(lo << (2 * (c % 4)));
                    p.hb[blk][j][i] |= static_cast<uint8_t>(hi << c);
                }
            }
        });
    if (w.type == GgmlType::Q5_K)
        return pack_units<kq::PackedQ5K, block_q5_K>(w, dst, g0, g1, w.n_in / 256, kq::PackedQ5K{},
                                                     [](kq::PackedQ5K& p, int j, const block_q5_K& x) {
            pack_q4k_row(p, j, x);
            for (int blk = 0; blk < 8; ++blk)
                for (int i = 0; i < 4; ++i) {
                    uint8_t h = 0;
                    for (int c = 0; c < 8; ++c) h |= static_cast<uint8_t>(((x.qh[4 * c + i] >> blk) & 1) << c);
                    p.hb[blk][j][i] = h;
                }
        });
    pack_units<kq::PackedQ4K, block_q4_K>(w, dst, g0, g1, w.n_in / 256, kq::PackedQ4K{},
                                          [](kq::PackedQ4K& p, int j, const block_q4_K& x) { pack_q4k_row(p, j, x); });
}

}  // namespace

void pack_weights(const MatView& w, void* dst) {
    STRATA_CHECK(packed_size(w) > 0, "pack_weights: type {} has no packed layout", type_info(w.type).name);
    const int64_t groups = (w.n_out + kq::kPackRows - 1) / kq::kPackRows;
    // Loading a model packs every matrix once: big ones on a few threads (each group is
    // written by one of them, so the bytes are the same).
    const auto n_threads = static_cast<int64_t>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
    if (packed_size(w) < (size_t{8} << 20) || n_threads == 1) return pack_groups(w, dst, 0, groups);
    std::vector<std::thread> ts;
    for (int64_t k = 1; k < n_threads; ++k)
        ts.emplace_back(pack_groups, std::cref(w), dst, groups * k / n_threads, groups * (k + 1) / n_threads);
    pack_groups(w, dst, 0, groups / n_threads);
    for (auto& t : ts) t.join();
}

}  // namespace strata
