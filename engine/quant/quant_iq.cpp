// IQ formats: IQ4_NL, IQ4_XS (non-linear 4-bit codebook) and the grid formats IQ3_XXS,
// IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S. Dequantizers evaluate ggml's float expressions (sign
// applied by flipping the sign bit, which is exactly ggml's multiply by -1.f).
//
// Grid quantizers: signs are taken from the data (for the 7-bit sign-index formats the
// count of negatives per 8 values must be even, so on odd parity the smallest-magnitude
// value gets the wrong sign and is approximated from the other side); magnitudes are
// matched to grid points with iq::GridSearch over a few candidate scales per scale group,
// least-squares rescaled; then the 4-bit scales are quantized against the super-block
// scale and the grid points re-chosen with the final scales.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"

namespace strata::quant_detail {
namespace {

// ---- IQ4 codebook ---------------------------------------------------------------------

// Nearest codebook index by table: every midpoint between codebook values is a multiple
// of 0.5, so floor(2v) decides the index (exact ties may round either way).
constexpr int kIq4LutBias = 272;  // 2 * v + bias >= 0 for v >= -136
constexpr auto kIq4Lut = [] {
    std::array<uint8_t, 2 * kIq4LutBias> lut{};
    for (int k = 0; k < 2 * kIq4LutBias; ++k) {
        const float v = 0.5f * static_cast<float>(k - kIq4LutBias);
        int idx = 0;
        for (int i = 0; i < 15; ++i) idx += 0.5f * static_cast<float>(kValuesIq4nl[i] + kValuesIq4nl[i + 1]) <= v;
        lut[k] = static_cast<uint8_t>(idx);
    }
    return lut;
}();

inline int nearest_iq4(float v) {
    const float w = std::fmin(std::fmax(2.0f * v + static_cast<float>(kIq4LutBias), 0.0f),
                              static_cast<float>(2 * kIq4LutBias - 1));
    return kIq4Lut[static_cast<int>(w)];
}

// Best signed scale d for x[0..n) ~ d * kvalues[q]. Candidates put the largest-magnitude
// value near either end of the codebook (-127 or +113), each re-fitted by least squares.
float fit_iq4(const float* x, int n) {
    const float max = signed_absmax(x, n);
    if (max == 0.0f) return 0.0f;
    float best_d = 0.0f;
    float best_score = -1.0f;
    for (float end : {-127.0f, 113.0f}) {
        for (int step = -8; step <= 8; step += 2) {
            const float id = (end + static_cast<float>(step)) / max;
            float sxv = 0.0f, svv = 0.0f;
            for (int i = 0; i < n; ++i) {
                const float v = kValuesIq4nl[nearest_iq4(x[i] * id)];
                sxv += x[i] * v;
                svv += v * v;
            }
            if (svv > 0.0f && sxv * sxv / svv > best_score) {
                best_score = sxv * sxv / svv;
                best_d = sxv / svv;
            }
        }
    }
    return best_d;
}

// Packs 32 codebook indices of x / d in the Q4_0 nibble layout.
void pack_iq4(const float* x, float d, uint8_t* qs) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; ++j) {
        const int lo = nearest_iq4(x[j] * id), hi = nearest_iq4(x[j + 16] * id);
        qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
}

// ---- grid formats -----------------------------------------------------------------------

// Sub-block scale of each format, written exactly as the dequantizer computes it.
inline float scale_iq2(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }
inline float scale_iq3xxs(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.5f; }
inline float scale_iq3s(float d, int s) { return d * static_cast<float>(1 + 2 * s); }

struct IqFormat {
    const iq::GridSearch& grid;
    int scale_len;                 // values sharing one 4-bit scale (32 or 16)
    bool even_signs;               // 7-bit sign index: even count of negatives per 8
    float (*sub_scale)(float, int);
};

// Everything a grid format stores for one super-block, before bit packing.
struct IqPlan {
    uint16_t d = 0;
    uint8_t signs[32] = {};   // per 8 values: bit j set = value j negative
    uint8_t scales[16] = {};  // 4-bit, one per scale_len values
    uint16_t idx[64] = {};    // grid index per dim values
};

// Assigns grid points to t[0..n) / scale; returns sum(t.g) and sum(g.g) in grid units.
void assign(const iq::GridSearch& grid, const float* t, int n, float scale, uint16_t* idx,
            float* stg, float* sgg) {
    const int dim = grid.dim();
    const float inv = 1.0f / scale;
    float u[8];
    *stg = *sgg = 0.0f;
    for (int c = 0; c < n / dim; ++c) {
        for (int k = 0; k < dim; ++k) u[k] = t[c * dim + k] * inv;
        const int i = grid.nearest(u);
        idx[c] = static_cast<uint16_t>(i);
        const float* p = grid.point(i);
        for (int k = 0; k < dim; ++k) {
            *stg += t[c * dim + k] * p[k];
            *sgg += p[k] * p[k];
        }
    }
}

// Best continuous scale (x units per grid unit) for targets t[0..n).
float fit_grid_scale(const iq::GridSearch& grid, const float* t, int n) {
    const float amax = *std::max_element(t, t + n);
    if (!(amax > 0.0f)) return 0.0f;
    uint16_t idx[8];
    float best_scale = 0.0f, best_score = -1.0f;
    auto consider = [&](float scale) {
        float stg, sgg;
        assign(grid, t, n, scale, idx, &stg, &sgg);
        if (stg > 0.0f && stg * stg / sgg > best_score) {
            best_score = stg * stg / sgg;
            best_scale = stg / sgg;
        }
    };
    // r = where the largest target lands relative to the top level (r > 1 clips it).
    for (int r10 = 5; r10 <= 15; ++r10)
        consider(amax / (grid.max_level() * 0.1f * static_cast<float>(r10)));
    if (best_scale > 0.0f) consider(best_scale);  // one refinement at the fitted scale
    return best_scale;
}

void plan_superblock(const IqFormat& f, const float* x, IqPlan& p) {
    float t[kQKK];  // magnitudes to match; negative where the stored sign is wrong
    for (int c = 0; c < 32; ++c) {
        const float* xc = x + 8 * c;
        uint8_t s = 0;
        int jmin = 0;
        for (int j = 0; j < 8; ++j) {
            s |= static_cast<uint8_t>((xc[j] < 0.0f) << j);
            if (std::fabs(xc[j]) < std::fabs(xc[jmin])) jmin = j;
        }
        if (f.even_signs && (std::popcount(s) & 1)) s ^= static_cast<uint8_t>(1u << jmin);
        p.signs[c] = s;
        for (int j = 0; j < 8; ++j) {
            const bool stored_negative = (s >> j) & 1;
            t[8 * c + j] = stored_negative == (xc[j] < 0.0f) ? std::fabs(xc[j]) : -std::fabs(xc[j]);
        }
    }
    const int ngroups = kQKK / f.scale_len;
    float best[16];
    float max_scale = 0.0f;
    for (int g = 0; g < ngroups; ++g) {
        best[g] = fit_grid_scale(f.grid, t + g * f.scale_len, f.scale_len);
        max_scale = std::max(max_scale, best[g]);
    }
    if (!(max_scale > 0.0f)) return;  // all-zero (or all-NaN) block: d = 0
    p.d = f32_to_fp16(max_scale / f.sub_scale(1.0f, 15));
    const float df = half_to_float(p.d);
    for (int g = 0; g < ngroups; ++g) {
        int s_best = 0;
        for (int s = 1; s < 16; ++s)
            if (std::fabs(f.sub_scale(df, s) - best[g]) < std::fabs(f.sub_scale(df, s_best) - best[g]))
                s_best = s;
        p.scales[g] = static_cast<uint8_t>(s_best);
        const float db = f.sub_scale(df, s_best);
        float stg, sgg;
        if (db > 0.0f)
            assign(f.grid, t + g * f.scale_len, f.scale_len, db,
                   p.idx + g * f.scale_len / f.grid.dim(), &stg, &sgg);
    }
}

template <typename U>
inline const uint8_t* grid_bytes(const U& entry) {
    return reinterpret_cast<const uint8_t*>(&entry);
}

// Writes n values db * grid[j] with sign bit j of signs (ggml's order within a group).
inline void put_group(float* y, float db, const uint8_t* grid, uint32_t signs, int n) {
    for (int j = 0; j < n; ++j) y[j] = apply_sign(db * static_cast<float>(grid[j]), (signs >> j) & 1u);
}

}  // namespace

// ---- IQ4_NL / IQ4_XS ----------------------------------------------------------------------

void dequant_iq4_nl(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq4_nl*>(src);
    for (int64_t i = 0; i < nb; ++i, y += kQK) {
        const float d = half_to_float(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(kValuesIq4nl[x[i].qs[j] & 0xF]);
            y[j + 16] = d * static_cast<float>(kValuesIq4nl[x[i].qs[j] >> 4]);
        }
    }
}

void quant_iq4_nl(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq4_nl*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQK) {
        y[i].d = f32_to_fp16(fit_iq4(x, kQK));
        pack_iq4(x, half_to_float(y[i].d), y[i].qs);
    }
}

void dequant_iq4_xs(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq4_xs*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        const uint8_t* qs = x[i].qs;
        for (int b = 0; b < 8; ++b, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[b / 2] >> (4 * (b % 2))) & 0xF) |
                           (((x[i].scales_h >> (2 * b)) & 3) << 4);
            const float dl = d * static_cast<float>(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(kValuesIq4nl[qs[j] & 0xF]);
                y[j + 16] = dl * static_cast<float>(kValuesIq4nl[qs[j] >> 4]);
            }
        }
    }
}

void quant_iq4_xs(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq4_xs*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        std::memset(&y[i], 0, sizeof y[i]);
        float scales[8], amax = 0.0f, max = 0.0f;
        for (int b = 0; b < 8; ++b) {
            scales[b] = fit_iq4(x + 32 * b, 32);
            if (std::fabs(scales[b]) > amax) {
                amax = std::fabs(scales[b]);
                max = scales[b];
            }
        }
        // The largest sub-block scale maps to -32, the 6-bit range's unpaired end.
        y[i].d = f32_to_fp16(-max / 32.0f);
        const float d = half_to_float(y[i].d);
        for (int b = 0; b < 8; ++b) {
            const int l = d != 0.0f ? round_clamp(scales[b] / d, -32, 31) : 0;
            const int ls = l + 32;
            y[i].scales_l[b / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (b % 2)));
            y[i].scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * b));
            pack_iq4(x + 32 * b, d * static_cast<float>(l), y[i].qs + 16 * b);
        }
    }
}

// ---- IQ3_XXS --------------------------------------------------------------------------

void dequant_iq3_xxs(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq3_xxs*>(src);
    const auto& grid = iq::kIq3xxsGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        for (int b = 0; b < 8; ++b) {
            const uint8_t* qs = x[i].qs + 8 * b;
            uint32_t aux;
            std::memcpy(&aux, x[i].qs + 64 + 4 * b, 4);
            const float db = scale_iq3xxs(d, static_cast<int>(aux >> 28));
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint32_t signs = iq::kSignsIq2xs[(aux >> (7 * l)) & 127];
                put_group(y, db, grid_bytes(grid[qs[2 * l]]), signs, 4);
                put_group(y + 4, db, grid_bytes(grid[qs[2 * l + 1]]), signs >> 4, 4);
            }
        }
    }
}

void quant_iq3_xxs(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq3_xxs*>(dst);
    const IqFormat f{iq::iq3xxs_search(), 32, true, scale_iq3xxs};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        IqPlan p;
        plan_superblock(f, x, p);
        y[i].d = p.d;
        for (int k = 0; k < 64; ++k) y[i].qs[k] = static_cast<uint8_t>(p.idx[k]);
        for (int b = 0; b < 8; ++b) {
            uint32_t aux = static_cast<uint32_t>(p.scales[b]) << 28;
            for (int l = 0; l < 4; ++l) aux |= static_cast<uint32_t>(p.signs[4 * b + l] & 127) << (7 * l);
            std::memcpy(y[i].qs + 64 + 4 * b, &aux, 4);
        }
    }
}

// ---- IQ3_S ----------------------------------------------------------------------------

void dequant_iq3_s(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq3_s*>(src);
    const auto& grid = iq::kIq3sGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        for (int b = 0; b < 8; ++b) {
            const float db = scale_iq3s(d, (x[i].scales[b / 2] >> (4 * (b % 2))) & 0xF);
            const uint8_t* qs = x[i].qs + 8 * b;
            const uint32_t qh = x[i].qh[b];
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint32_t signs = x[i].signs[4 * b + l];
                const uint32_t i1 = qs[2 * l] | (((qh >> (2 * l)) & 1u) << 8);
                const uint32_t i2 = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
                put_group(y, db, grid_bytes(grid[i1]), signs, 4);
                put_group(y + 4, db, grid_bytes(grid[i2]), signs >> 4, 4);
            }
        }
    }
}

void quant_iq3_s(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq3_s*>(dst);
    const IqFormat f{iq::iq3s_search(), 32, false, scale_iq3s};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        IqPlan p;
        plan_superblock(f, x, p);
        std::memset(&y[i], 0, sizeof y[i]);
        y[i].d = p.d;
        for (int k = 0; k < 64; ++k) {
            y[i].qs[k] = static_cast<uint8_t>(p.idx[k] & 0xFF);
            y[i].qh[k / 8] |= static_cast<uint8_t>((p.idx[k] >> 8) << (k % 8));
        }
        std::memcpy(y[i].signs, p.signs, 32);
        for (int b = 0; b < 8; ++b) y[i].scales[b / 2] |= static_cast<uint8_t>(p.scales[b] << (4 * (b % 2)));
    }
}

// ---- IQ2_XXS --------------------------------------------------------------------------

void dequant_iq2_xxs(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq2_xxs*>(src);
    const auto& grid = iq::kIq2xxsGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        for (int b = 0; b < 8; ++b) {
            const uint8_t* q8 = x[i].qs + 8 * b;
            uint32_t aux;
            std::memcpy(&aux, q8 + 4, 4);
            const float db = scale_iq2(d, static_cast<int>(aux >> 28));
            for (int l = 0; l < 4; ++l, y += 8)
                put_group(y, db, grid_bytes(grid[q8[l]]), iq::kSignsIq2xs[(aux >> (7 * l)) & 127], 8);
        }
    }
}

void quant_iq2_xxs(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq2_xxs*>(dst);
    const IqFormat f{iq::iq2xxs_search(), 32, true, scale_iq2};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        IqPlan p;
        plan_superblock(f, x, p);
        y[i].d = p.d;
        for (int b = 0; b < 8; ++b) {
            uint32_t aux = static_cast<uint32_t>(p.scales[b]) << 28;
            for (int l = 0; l < 4; ++l) {
                y[i].qs[8 * b + l] = static_cast<uint8_t>(p.idx[4 * b + l]);
                aux |= static_cast<uint32_t>(p.signs[4 * b + l] & 127) << (7 * l);
            }
            std::memcpy(y[i].qs + 8 * b + 4, &aux, 4);
        }
    }
}

// ---- IQ2_XS ---------------------------------------------------------------------------

void dequant_iq2_xs(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq2_xs*>(src);
    const auto& grid = iq::kIq2xsGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        for (int b = 0; b < 8; ++b) {
            const float db[2] = {scale_iq2(d, x[i].scales[b] & 0xF), scale_iq2(d, x[i].scales[b] >> 4)};
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint16_t q = x[i].qs[4 * b + l];
                put_group(y, db[l / 2], grid_bytes(grid[q & 511]), iq::kSignsIq2xs[q >> 9], 8);
            }
        }
    }
}

void quant_iq2_xs(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq2_xs*>(dst);
    const IqFormat f{iq::iq2xs_search(), 16, true, scale_iq2};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        IqPlan p;
        plan_superblock(f, x, p);
        y[i].d = p.d;
        for (int k = 0; k < 32; ++k)
            y[i].qs[k] = static_cast<uint16_t>(p.idx[k] | ((p.signs[k] & 127) << 9));
        for (int b = 0; b < 8; ++b)
            y[i].scales[b] = static_cast<uint8_t>(p.scales[2 * b] | (p.scales[2 * b + 1] << 4));
    }
}

// ---- IQ2_S ----------------------------------------------------------------------------

void dequant_iq2_s(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq2_s*>(src);
    const auto& grid = iq::kIq2sGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        const uint8_t* signs = x[i].qs + 32;
        for (int b = 0; b < 8; ++b) {
            const float db[2] = {scale_iq2(d, x[i].scales[b] & 0xF), scale_iq2(d, x[i].scales[b] >> 4)};
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint32_t idx = x[i].qs[4 * b + l] | (((x[i].qh[b] >> (2 * l)) & 3u) << 8);
                put_group(y, db[l / 2], grid_bytes(grid[idx]), signs[4 * b + l], 8);
            }
        }
    }
}

void quant_iq2_s(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq2_s*>(dst);
    const IqFormat f{iq::iq2s_search(), 16, false, scale_iq2};
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        IqPlan p;
        plan_superblock(f, x, p);
        std::memset(&y[i], 0, sizeof y[i]);
        y[i].d = p.d;
        for (int k = 0; k < 32; ++k) {
            y[i].qs[k] = static_cast<uint8_t>(p.idx[k] & 0xFF);
            y[i].qs[32 + k] = p.signs[k];
            y[i].qh[k / 4] |= static_cast<uint8_t>((p.idx[k] >> 8) << (2 * (k % 4)));
        }
        for (int b = 0; b < 8; ++b)
            y[i].scales[b] = static_cast<uint8_t>(p.scales[2 * b] | (p.scales[2 * b + 1] << 4));
    }
}

}  // namespace strata::quant_detail
