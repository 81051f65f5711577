// IQ formats: IQ4_NL, IQ4_XS (non-linear 4-bit codebook) and the grid formats IQ3_XXS,
// IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M. Dequantizers evaluate ggml's float
// expressions (sign applied by flipping the sign bit, which is exactly ggml's multiply by
// -1.f).
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
#include <numeric>

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

// ---- IQ1 (ternary grid) -----------------------------------------------------------------
//
// x = dl * (g + delta): g a point of iq1s_grid (8 values in {-1, 0, 1}), delta = +-1/8 per
// shift group, dl = d * (2s + 1) per scale group (s 3 bits), d fp16 per super-block.
// IQ1_S: scale and shift groups of 32 values. IQ1_M: scale groups of 16, shift groups of 8.
//
// Quantizer, per super-block:
//  1. each scale group gets the exact continuous optimum of sum (x - s (L + delta))^2
//     over L in {-1, 0, 1} per value, every shift pattern of the group and s > 0 (sorted
//     values split into three runs, as ggml's search does, without importance weights);
//     its scale s_u and curvature C_u = sum (L + delta)^2 are kept;
//  2. d: of 65 candidates max(s_u) / t (t = 7.5 .. 15.5), each also refitted by least
//     squares, the one that, as stored (fp16), minimizes sum_u C_u (s_u - d (2 l_u + 1))^2
//     (l_u its nearest 3-bit scale);
//  3. each scale group tries the scales next to s_u / d (and each shift group both
//     shifts) with the grid points iq::GridSearch finds for x / dl - delta, and keeps the
//     least squared error.
// A group of zeros in a non-zero super-block comes back as +-dl / 8 (no value is 0 after
// the shift); an all-zero super-block gives exact zeros. Non-finite inputs count as 0.

inline void put_iq1_group(float* y, float dl, float delta, uint64_t e) {
    for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(static_cast<int8_t>(e >> (8 * j))) + delta);
}

// Step 3 tries the 3-bit scales within this distance of the group's continuous optimum
// (all 8 reach the same error within 0.1% on N(0, 1) data, at half the speed).
constexpr int kIq1ScaleWindow = 1;

struct Iq1Plan {
    uint16_t d = 0;
    uint8_t scales[16] = {};  // 3-bit, one per scale group
    uint8_t shift[32] = {};   // per 8 values: 1 = delta is -1/8
    uint16_t idx[32] = {};    // grid index per 8 values
};

// Step 1: the best s > 0 for x[0..n) (n <= 32), 0 when no fit has sum(x q) > 0.
float fit_ternary(const float* x, int n, int shift_len, float* curv) {
    int order[32];
    std::iota(order, order + n, 0);
    std::sort(order, order + n, [&](int a, int b) { return x[a] < x[b]; });
    // At the optimum every value has its nearest level, and the level boundaries are
    // s (-1/2 + sg delta) < 0 and s (1/2 + sg delta) > 0: the L = -1 values are negative
    // and the L = +1 values positive, so the splits i1 <= n_neg <= n_nonpos <= i2 cover it.
    int n_neg = 0, n_nonpos = 0;
    for (int i = 0; i < n; ++i) n_neg += x[i] < 0.0f, n_nonpos += x[i] <= 0.0f;
    const float dl = kIq1Delta;
    constexpr float kTieLow = 1.0f - 1e-5f, kTieHigh = 1.0f + 1e-5f;
    float best_s = 0.0f, best_score = 0.0f;
    *curv = 0.0f;
    for (int pat = 0; pat < 1 << (n / shift_len); ++pat) {
        // Prefix sums over the sorted values of x and of the shift signs sg; with the
        // lowest i1 values at L = -1 and the values from i2 on at L = +1:
        //   sum x (L + sg delta)  = (sx[n] - sx[i2] - sx[i1]) + delta * sum sg x
        //   sum (L + sg delta)^2  = i1 + n - i2 + 2 delta (ss[n] - ss[i2] - ss[i1]) + n delta^2
        // i.e. a[i1] - sx[i2] and b[i1] - q[i2] with q[j] = j + 2 delta ss[j].
        float sx[33], q[33], ss = 0.0f, sgx = 0.0f;
        sx[0] = q[0] = 0.0f;
        for (int j = 0; j < n; ++j) {
            const int i = order[j];
            const float sg = (pat >> (i / shift_len)) & 1 ? -1.0f : 1.0f;
            sx[j + 1] = sx[j] + x[i];
            ss += sg;
            q[j + 1] = static_cast<float>(j + 1) + 2.0f * dl * ss;
            sgx += sg * x[i];
        }
        // q[n] = n + 2 delta ss[n]; so b[i1] = (i1 - 2 delta ss[i1]) + q[n] + n delta^2, and
        // i1 - 2 delta ss[i1] = 2 i1 - q[i1].
        for (int i1 = 0; i1 <= n_neg; ++i1) {
            const float a = sx[n] + dl * sgx - sx[i1];
            const float b = (2.0f * static_cast<float>(i1) - q[i1]) + q[n] + static_cast<float>(n) * dl * dl;
            for (int i2 = n_nonpos; i2 <= n; ++i2) {
                const float sqx = a - sx[i2], sq2 = b - q[i2];  // sq2 >= n delta^2 > 0
                if (!(sqx > 0.0f && sqx * sqx > kTieLow * best_score * sq2)) continue;
                // Ties (within float rounding) go to the smaller scale: a constant group c
                // is s (1 + delta) with every L = 1 as well as 8 s (0 + delta) with L = 0.
                const float score = sqx * sqx / sq2, sc = sqx / sq2;
                if (score > kTieHigh * best_score || sc < best_s) {
                    best_score = std::max(score, best_score);
                    best_s = sc;
                    *curv = sq2;
                }
            }
        }
    }
    return best_s;
}

// The grid point for x[0..8) / dl - sg delta (dl > 0); returns its squared error.
float assign_iq1(const iq::GridSearch& grid, const float* x, float dl, bool neg, uint16_t* idx) {
    const float delta = neg ? -kIq1Delta : kIq1Delta;
    const float inv = 1.0f / dl;
    float t[8];
    for (int k = 0; k < 8; ++k) t[k] = x[k] * inv - delta + 1.0f;  // GridSearch levels are g + 1
    const int i = grid.nearest(t);
    *idx = static_cast<uint16_t>(i);
    const float* p = grid.point(i);
    float err = 0.0f;
    for (int k = 0; k < 8; ++k) {
        const float e = x[k] - dl * (p[k] - 1.0f + delta);
        err += e * e;
    }
    return err;
}

void plan_iq1(const float* x_in, int scale_len, int shift_len, Iq1Plan& p) {
    const iq::GridSearch& grid = iq::iq1s_search();
    float x[kQKK];
    for (int i = 0; i < kQKK; ++i) x[i] = std::isfinite(x_in[i]) ? x_in[i] : 0.0f;
    const int nunits = kQKK / scale_len;
    float s[16], c[16], max_s = 0.0f;
    for (int u = 0; u < nunits; ++u) {
        s[u] = fit_ternary(x + u * scale_len, scale_len, shift_len, &c[u]);
        max_s = std::max(max_s, s[u]);
    }
    if (!(max_s > 0.0f)) return;  // all zero: d = 0

    // Step 2. The cost is that of d as stored (fp16).
    auto cost = [&](float& d, float* smm, float* smmc) {
        d = half_to_float(f32_to_fp16(d));
        float e = 0.0f;
        *smm = *smmc = 0.0f;
        for (int u = 0; u < nunits; ++u) {
            const float m = static_cast<float>(2 * round_clamp(0.5f * (s[u] / d - 1.0f), 0, 7) + 1);
            e += c[u] * (s[u] - d * m) * (s[u] - d * m);
            *smm += c[u] * m * s[u];
            *smmc += c[u] * m * m;
        }
        return e;
    };
    float best_d = max_s / 15.0f, best_e = -1.0f;
    for (int k = 0; k <= 64; ++k) {
        float d = max_s / (7.5f + 0.125f * static_cast<float>(k));
        float smm, smmc;
        const float e = cost(d, &smm, &smmc);
        if (best_e < 0.0f || e < best_e) best_e = e, best_d = d;
        float refit = smm / smmc;  // least squares for these l_u
        if (refit > 0.0f) {
            const float er = cost(refit, &smm, &smmc);
            if (er < best_e) best_e = er, best_d = refit;
        }
    }
    p.d = f32_to_fp16(best_d);
    const float df = half_to_float(p.d);
    if (!(df > 0.0f)) {
        p.d = 0;
        return;
    }

    // Step 3.
    const int groups = scale_len / 8, per_shift = shift_len / 8;
    for (int u = 0; u < nunits; ++u) {
        const float* xu = x + u * scale_len;
        float best = -1.0f;
        const int l0 = round_clamp(0.5f * (s[u] / df - 1.0f), 0, 7);
        for (int l = std::max(0, l0 - kIq1ScaleWindow); l <= std::min(7, l0 + kIq1ScaleWindow); ++l) {
            const float dl = df * static_cast<float>(2 * l + 1);
            float err[4][2];
            uint16_t idx[4][2];
            for (int g = 0; g < groups; ++g)
                for (int neg = 0; neg < 2; ++neg) err[g][neg] = assign_iq1(grid, xu + 8 * g, dl, neg, &idx[g][neg]);
            // Shift groups of per_shift grid groups: each takes its better shift.
            float total = 0.0f;
            uint8_t shift[4];
            for (int g0 = 0; g0 < groups; g0 += per_shift) {
                float e[2] = {0.0f, 0.0f};
                for (int g = g0; g < g0 + per_shift; ++g) e[0] += err[g][0], e[1] += err[g][1];
                const uint8_t neg = e[1] < e[0];
                for (int g = g0; g < g0 + per_shift; ++g) shift[g] = neg;
                total += e[neg];
            }
            if (best < 0.0f || total < best) {
                best = total;
                p.scales[u] = static_cast<uint8_t>(l);
                for (int g = 0; g < groups; ++g) {
                    p.shift[u * groups + g] = shift[g];
                    p.idx[u * groups + g] = idx[g][shift[g]];
                }
            }
        }
    }
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


// ---- IQ1_S ----------------------------------------------------------------------------

void dequant_iq1_s(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq1_s*>(src);
    const auto& grid = iq::kIq1sGrid;
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        for (int b = 0; b < 8; ++b) {
            const uint32_t qh = x[i].qh[b];
            const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
            for (int l = 0; l < 4; ++l, y += 8)
                put_iq1_group(y, dl, delta, grid[x[i].qs[4 * b + l] | (((qh >> (3 * l)) & 7) << 8)]);
        }
    }
}

void quant_iq1_s(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq1_s*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        Iq1Plan p;
        plan_iq1(x, 32, 32, p);
        std::memset(&y[i], 0, sizeof y[i]);
        y[i].d = p.d;
        for (int b = 0; b < 8; ++b) {
            uint32_t qh = static_cast<uint32_t>(p.scales[b]) << 12 | static_cast<uint32_t>(p.shift[4 * b]) << 15;
            for (int l = 0; l < 4; ++l) {
                y[i].qs[4 * b + l] = static_cast<uint8_t>(p.idx[4 * b + l] & 0xFF);
                qh |= static_cast<uint32_t>(p.idx[4 * b + l] >> 8) << (3 * l);
            }
            y[i].qh[b] = static_cast<uint16_t>(qh);
        }
    }
}

// ---- IQ1_M ----------------------------------------------------------------------------

void dequant_iq1_m(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_iq1_m*>(src);
    const auto& grid = iq::kIq1sGrid;
    for (int64_t i = 0; i < nb; ++i) {
        uint16_t sc[4];
        std::memcpy(sc, x[i].scales, 8);
        const float d = half_to_float(iq1m_scale_bits(x[i]));
        for (int b = 0; b < 8; ++b) {
            const float dl[2] = {d * static_cast<float>(2 * ((sc[b / 2] >> (6 * (b % 2))) & 7) + 1),
                                 d * static_cast<float>(2 * ((sc[b / 2] >> (6 * (b % 2) + 3)) & 7) + 1)};
            for (int l = 0; l < 4; ++l, y += 8) {
                const uint32_t h = static_cast<uint32_t>(x[i].qh[2 * b + l / 2]) >> (4 * (l % 2));
                const float delta = h & 8 ? -kIq1Delta : kIq1Delta;
                put_iq1_group(y, dl[l / 2], delta, grid[x[i].qs[4 * b + l] | ((h & 7) << 8)]);
            }
        }
    }
}

void quant_iq1_m(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_iq1_m*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        Iq1Plan p;
        plan_iq1(x, 16, 8, p);
        std::memset(&y[i], 0, sizeof y[i]);
        uint16_t sc[4] = {};
        for (int h = 0; h < 16; ++h) sc[h / 4] |= static_cast<uint16_t>(p.scales[h] << (3 * (h % 4)));
        for (int k = 0; k < 4; ++k) sc[k] |= static_cast<uint16_t>(((p.d >> (4 * k)) & 0xF) << 12);
        std::memcpy(y[i].scales, sc, 8);
        for (int g = 0; g < 32; ++g) {
            y[i].qs[g] = static_cast<uint8_t>(p.idx[g] & 0xFF);
            y[i].qh[g / 2] |= static_cast<uint8_t>(((p.idx[g] >> 8) | (p.shift[g] << 3)) << (4 * (g % 2)));
        }
    }
}

}  // namespace strata::quant_detail
