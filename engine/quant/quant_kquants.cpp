// K-quants Q2_K..Q6_K (super-blocks of 256) and the Q8_K activation helper.
// Dequantizers evaluate ggml's float expressions in ggml's order (bit-identical output).
// Quantizers are simpler than ggml's: per sub-block a least-squares fit over a handful of
// candidate scales, then the sub-block scales/mins are quantized against one super-block
// scale and the values are re-rounded with the final (quantized) scales.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/blocks.h"

namespace strata::quant_detail {
namespace {

// ---- fitting helpers ------------------------------------------------------------------

struct Affine {
    float scale;  // >= 0
    float min;    // >= 0; the format reconstructs x = scale * q - min
};

// Fits x[0..n) ~ scale * q - min with integer q in [0, nmax]. Candidate quantizations
// come from stretching [min(x, 0), max(x)] slightly around nmax steps; for each, the
// scale and offset are re-fitted by least squares (offset kept <= 0 since mins are
// stored unsigned) and the fit with the smallest squared error wins.
Affine fit_affine(const float* x, int n, int nmax) {
    float lo = 0.0f, hi = x[0];
    double sx = 0, sxx = 0;
    for (int i = 0; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        sx += x[i];
        sxx += static_cast<double>(x[i]) * x[i];
    }
    if (!(hi > lo)) return {0.0f, -lo};
    Affine best{(hi - lo) / static_cast<float>(nmax), -lo};
    double best_err = INFINITY;
    for (int step = -10; step <= 10; ++step) {
        const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
        double sq = 0, sqq = 0, sqx = 0;
        for (int i = 0; i < n; ++i) {
            const double q = round_clamp(iscale * (x[i] - lo), 0, nmax);
            sq += q;
            sqq += q * q;
            sqx += q * x[i];
        }
        const double det = n * sqq - sq * sq;
        if (det <= 0) continue;
        double a = (n * sqx - sq * sx) / det;
        double b = (sqq * sx - sq * sqx) / det;
        if (b > 0) {  // would need a negative min
            b = 0;
            a = sqx / sqq;
        }
        if (a <= 0) continue;
        const double err = sxx - 2 * a * sqx - 2 * b * sx + a * a * sqq + 2 * a * b * sq + n * b * b;
        if (err < best_err) {
            best_err = err;
            best = {static_cast<float>(a), static_cast<float>(-b)};
        }
    }
    return best;
}

// Fits x[0..n) ~ scale * q with integer q in [-nmax, nmax - 1]. The scale is signed so
// the largest-magnitude value can use -nmax; among a few stretched candidates the one
// with the least squared error (largest (x.q)^2 / q.q) wins.
float fit_symmetric(const float* x, int n, int nmax) {
    const float max = signed_absmax(x, n);
    if (max == 0.0f) return 0.0f;
    float best_scale = 0.0f;
    double best_score = -1;
    for (int step = -9; step <= 9; ++step) {
        const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
        double sqq = 0, sqx = 0;
        for (int i = 0; i < n; ++i) {
            const double q = round_clamp(iscale * x[i], -nmax, nmax - 1);
            sqq += q * q;
            sqx += q * x[i];
        }
        if (sqq > 0 && sqx * sqx / sqq > best_score) {
            best_score = sqx * sqx / sqq;
            best_scale = static_cast<float>(sqx / sqq);
        }
    }
    return best_scale;
}

// Quantizes non-negative sub-block values v[0..n) to integers in [0, levels] against one
// super-block scale; returns that scale as stored (fp16) and writes the integers.
uint16_t quantize_scales(const float* v, int n, int levels, uint8_t* out) {
    const float vmax = *std::max_element(v, v + n);
    const float d = vmax / static_cast<float>(levels);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; ++j) out[j] = static_cast<uint8_t>(round_clamp(v[j] * id, 0, levels));
    return f32_to_fp16(d);
}

// Signed sub-block scales s[0..n) to integers in [-half, half - 1]; the largest one maps
// to -half. Returns the super-block scale as stored.
uint16_t quantize_signed_scales(const float* s, int n, int half, int* out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (std::fabs(s[j]) > amax) {
            amax = std::fabs(s[j]);
            max = s[j];
        }
    }
    if (amax == 0.0f) {
        std::fill(out, out + n, 0);
        return 0;
    }
    const float iscale = -static_cast<float>(half) / max;
    for (int j = 0; j < n; ++j) out[j] = round_clamp(iscale * s[j], -half, half - 1);
    return f32_to_fp16(1.0f / iscale);
}

// Re-rounds x to [0, nmax] with the final scale and min (x = dq * q - mq).
inline void requant_affine(const float* x, int n, float dq, float mq, int nmax, uint8_t* q) {
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(round_clamp((x[i] + mq) * id, 0, nmax));
}

// Q4_K/Q5_K pack 8 six-bit scales and mins into 12 bytes (inverse of get_scale_min).
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
}

inline void get_scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Affine K-quant super-block (Q2_K, Q4_K, Q5_K): fits nsub sub-blocks, quantizes their
// scales/mins to scale_levels, and writes the final integers q[0..256).
void affine_superblock(const float* x, int nsub, int nmax, int scale_levels, uint8_t* q,
                       uint8_t* ls, uint8_t* lm, uint16_t* d, uint16_t* dmin) {
    const int sub = kQKK / nsub;
    float scales[16], mins[16];
    for (int j = 0; j < nsub; ++j) {
        const Affine f = fit_affine(x + sub * j, sub, nmax);
        scales[j] = f.scale;
        mins[j] = f.min;
    }
    *d = quantize_scales(scales, nsub, scale_levels, ls);
    *dmin = quantize_scales(mins, nsub, scale_levels, lm);
    const float df = half_to_float(*d), mf = half_to_float(*dmin);
    for (int j = 0; j < nsub; ++j)
        requant_affine(x + sub * j, sub, df * ls[j], mf * lm[j], nmax, q + sub * j);
}

// Symmetric K-quant super-block (Q3_K, Q6_K) with 16 sub-blocks of 16.
void symmetric_superblock(const float* x, int nmax, int scale_half, int* ls, uint16_t* d, int8_t* q) {
    float scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = fit_symmetric(x + 16 * j, 16, nmax);
    *d = quantize_signed_scales(scales, 16, scale_half, ls);
    const float df = half_to_float(*d);
    for (int j = 0; j < 16; ++j) {
        const float dq = df * static_cast<float>(ls[j]);
        const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
        for (int i = 0; i < 16; ++i)
            q[16 * j + i] = static_cast<int8_t>(round_clamp(x[16 * j + i] * id, -nmax, nmax - 1));
    }
}

}  // namespace

// ---- Q2_K -----------------------------------------------------------------------------

void dequant_q2_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q2_K*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int h = 0; h < 2; ++h, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half, ++is) {
                    const uint8_t sc = x[i].scales[is];
                    const float dl = d * static_cast<float>(sc & 0xF);
                    const float ml = dmin * static_cast<float>(sc >> 4);
                    const uint8_t* qq = q + 16 * half;
                    for (int l = 0; l < 16; ++l)
                        *y++ = dl * static_cast<float>((qq[l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void quant_q2_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q2_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        uint8_t q[kQKK], ls[16], lm[16];
        affine_superblock(x, 16, 3, 15, q, ls, lm, &y[i].d, &y[i].dmin);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
        std::memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < kQKK; ++e)
            y[i].qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q[e] << (2 * ((e % 128) / 32)));
    }
}

// ---- Q3_K -----------------------------------------------------------------------------

void dequant_q3_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q3_K*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d_all = half_to_float(x[i].d);
        const uint8_t* sc = x[i].scales;
        int scales[16];
        for (int s = 0; s < 16; ++s) {
            const int low = s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4;
            const int high = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
            scales[s] = (low | (high << 4)) - 32;
        }
        const uint8_t* q = x[i].qs;
        int is = 0;
        unsigned m = 1;  // hmask bit: 4h + j
        for (int h = 0; h < 2; ++h, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; ++half, ++is) {
                    const float dl = d_all * static_cast<float>(scales[is]);
                    const uint8_t* qq = q + 16 * half;
                    const uint8_t* hm = x[i].hmask + 16 * half;
                    for (int l = 0; l < 16; ++l) {
                        const int v = ((qq[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void quant_q3_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q3_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        int ls[16];
        int8_t q[kQKK];
        symmetric_superblock(x, 4, 32, ls, &y[i].d, q);
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        for (int s = 0; s < 16; ++s) {
            const int l = ls[s] + 32;  // 0..63
            if (s < 8) y[i].scales[s] |= static_cast<uint8_t>(l & 0xF);
            else y[i].scales[s - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
            y[i].scales[8 + s % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (s / 4)));
        }
        std::memset(y[i].qs, 0, sizeof y[i].qs);
        std::memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int e = 0; e < kQKK; ++e) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const int v = q[e] + 4;  // 0..7: low 2 bits in qs, bit 2 in hmask
            y[i].qs[32 * h + l] |= static_cast<uint8_t>((v & 3) << (2 * j));
            y[i].hmask[l] |= static_cast<uint8_t>((v >> 2) << (4 * h + j));
        }
    }
}

// ---- Q4_K -----------------------------------------------------------------------------

void dequant_q4_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q4_K*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        const uint8_t* q = x[i].qs;
        for (int c = 0; c < 4; ++c, q += 32) {
            uint8_t sc, mn;
            get_scale_min_k4(2 * c, x[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void quant_q4_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q4_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        uint8_t q[kQKK], ls[8], lm[8];
        affine_superblock(x, 8, 15, 63, q, ls, lm, &y[i].d, &y[i].dmin);
        pack_scale_min_k4(ls, lm, y[i].scales);
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l)
                y[i].qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

// ---- Q5_K -----------------------------------------------------------------------------

void dequant_q5_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q5_K*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d), dmin = half_to_float(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        for (int c = 0; c < 4; ++c, ql += 32) {
            uint8_t sc, mn;
            get_scale_min_k4(2 * c, x[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            const int b1 = 2 * c, b2 = 2 * c + 1;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (((qh[l] >> b1) & 1) << 4)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * static_cast<float>((ql[l] >> 4) + (((qh[l] >> b2) & 1) << 4)) - m2;
        }
    }
}

void quant_q5_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q5_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        uint8_t q[kQKK], ls[8], lm[8];
        affine_superblock(x, 8, 31, 63, q, ls, lm, &y[i].d, &y[i].dmin);
        pack_scale_min_k4(ls, lm, y[i].scales);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                y[i].qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
                y[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

// ---- Q6_K -----------------------------------------------------------------------------

void dequant_q6_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q6_K*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        const float d = half_to_float(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

void quant_q6_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q6_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        int ls[16];
        int8_t q[kQKK];
        symmetric_superblock(x, 32, 128, ls, &y[i].d, q);
        for (int s = 0; s < 16; ++s) y[i].scales[s] = static_cast<int8_t>(ls[s]);
        std::memset(y[i].ql, 0, sizeof y[i].ql);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < kQKK; ++e) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const int v = q[e] + 32;  // 0..63
            y[i].ql[64 * h + l + 32 * (k & 1)] |= static_cast<uint8_t>((v & 0xF) << (4 * (k >> 1)));
            y[i].qh[32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * k));
        }
    }
}

// ---- Q8_K -----------------------------------------------------------------------------

void dequant_q8_K(const void* src, float* y, int64_t nb) {
    const auto* x = static_cast<const block_q8_K*>(src);
    for (int64_t i = 0; i < nb; ++i, y += kQKK) {
        const float d = x[i].d;
        for (int j = 0; j < kQKK; ++j) y[j] = d * static_cast<float>(x[i].qs[j]);
    }
}

// As ggml's quantize_row_q8_K_ref: the largest-magnitude value maps to -127.
void quant_q8_K(const float* x, void* dst, int64_t nb) {
    auto* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += kQKK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < kQKK; ++j) {
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        std::memset(&y[i], 0, sizeof y[i]);
        if (amax == 0.0f) continue;
        const float iscale = -127.0f / max;
        for (int j = 0; j < kQKK; ++j) y[i].qs[j] = static_cast<int8_t>(round_clamp(iscale * x[j], -128, 127));
        for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
            y[i].bsums[g] = static_cast<int16_t>(sum);
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace strata::quant_detail
