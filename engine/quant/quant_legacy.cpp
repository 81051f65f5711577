// F32/F16/BF16 and the legacy 32-value formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
// Dequantizers evaluate the same float expressions as ggml's dequantize_row_* so the
// results are bit-identical; quantizers follow ggml's quantize_row_*_ref (including the
// inverse scale taken from the unrounded f32 d), so they produce the same bytes.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"

namespace strata::quant_detail {
namespace {

// fp16_to_f32 loops over subnormals; a 256 KiB table keeps F16 rows branch-free.
const float* fp16_table() {
    static const auto table = [] {
        auto t = std::make_unique<float[]>(65536);
        for (uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_f32(static_cast<uint16_t>(h));
        return t;
    }();
    return table.get();
}

// ggml truncates (int8_t)(v + offset) and clamps above; v + offset is >= 0 by
// construction, so truncation is floor. Clamping first keeps NaN inputs defined.
inline uint8_t trunc_clamp(float v, int hi) {
    v = std::fmin(std::fmax(v, 0.0f), static_cast<float>(hi));
    return static_cast<uint8_t>(v);
}

// Value with the largest magnitude, keeping its sign (ggml's "max" for Q4_0/Q5_0).
inline float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

}  // namespace

void dequant_f32(const void* src, float* dst, int64_t nb) {
    std::memcpy(dst, src, static_cast<size_t>(nb) * sizeof(float));
}
void quant_f32(const float* src, void* dst, int64_t nb) {
    std::memcpy(dst, src, static_cast<size_t>(nb) * sizeof(float));
}

namespace {

void dequant_f16_table(const uint8_t* s, float* dst, int64_t nb) {
    const float* table = fp16_table();
    for (int64_t i = 0; i < nb; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = table[h];
    }
}

// The CPU's own conversion (F16C), eight values at a time: exact, like the table, and
// without the table's 256 KiB of cache (the f16 KV cache is read through here on every
// attention step, while the weight stream evicts the table). A group holding an inf or
// NaN goes through the table: vcvtph2ps quiets signaling NaNs, the table keeps every
// bit, and the results must not depend on the CPU.
__attribute__((target("avx,f16c"))) void dequant_f16_f16c(const uint8_t* s, float* dst, int64_t nb) {
    const __m128i exp_mask = _mm_set1_epi16(0x7C00);
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i));
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask)) != 0) {
            dequant_f16_table(s + 2 * i, dst + i, 8);
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    dequant_f16_table(s + 2 * i, dst + i, nb - i);
}

// The same, sixteen values at a time, half the F16C path's instructions per value (the f16
// KV cache's conversion was 5-7% of a small hybrid's decode at 2k positions; that decode
// gained 0-10%, its rows mostly waiting on memory); the tail, eight at a time, then the
// table.
__attribute__((target("avx512f,avx512bw,avx512vl,avx,f16c"))) void dequant_f16_avx512(const uint8_t* s, float* dst,
                                                                                   int64_t nb) {
    const __m256i exp_mask = _mm256_set1_epi16(0x7C00);
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 2 * i));
        if (_mm256_cmpeq_epi16_mask(_mm256_and_si256(h, exp_mask), exp_mask) != 0) {
            dequant_f16_table(s + 2 * i, dst + i, 16);
            continue;
        }
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    }
    dequant_f16_f16c(s + 2 * i, dst + i, nb - i);
}

}  // namespace

int dequant_f16_widest() {
    static const int w = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl") ? 16
                         : __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx") ? 8
                                                                                            : 1;
    return w;
}
namespace {
void dequant_f16_on(int width, const uint8_t* s, float* dst, int64_t nb) {
    if (width >= 16) dequant_f16_avx512(s, dst, nb);
    else if (width >= 8) dequant_f16_f16c(s, dst, nb);
    else dequant_f16_table(s, dst, nb);
}
}  // namespace
void dequant_f16_width(int width, const void* src, float* dst, int64_t nb) {
    STRATA_CHECK(width <= dequant_f16_widest(), "dequant_f16: {} values at a time are not for this CPU", width);
    dequant_f16_on(width, static_cast<const uint8_t*>(src), dst, nb);
}
void dequant_f16(const void* src, float* dst, int64_t nb) {
    dequant_f16_on(dequant_f16_widest(), static_cast<const uint8_t*>(src), dst, nb);
}
void quant_f16(const float* src, void* dst, int64_t nb) {
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < nb; ++i) {
        const uint16_t h = f32_to_fp16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
    }
}

void dequant_bf16(const void* src, float* dst, int64_t nb) {
    const auto* s = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < nb; ++i) {
        uint16_t b;
        std::memcpy(&b, s + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
    }
}
void quant_bf16(const float* src, void* dst, int64_t nb) {
    auto* d = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < nb; ++i) {
        const uint16_t b = f32_to_bf16(src[i]);
        std::memcpy(d + 2 * i, &b, 2);
    }
}

void dequant_q4_0(const void* src, float* dst, int64_t nb) {
    const auto* x = static_cast<const block_q4_0*>(src);
    for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = half_to_float(x[i].d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
            dst[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}
void quant_q4_0(const float* src, void* dst, int64_t nb) {
    auto* y = static_cast<block_q4_0*>(dst);
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
        // Scale so the largest-magnitude value lands on -8, the one level without a
        // positive twin; that uses all 16 levels.
        const float d = signed_absmax(src, kQK) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
            const uint8_t lo = trunc_clamp(src[j] * id + 8.5f, 15);
            const uint8_t hi = trunc_clamp(src[j + 16] * id + 8.5f, 15);
            y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

void dequant_q4_1(const void* src, float* dst, int64_t nb) {
    const auto* x = static_cast<const block_q4_1*>(src);
    for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = half_to_float(x[i].d), m = half_to_float(x[i].m);
        for (int j = 0; j < 16; ++j) {
            dst[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
            dst[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}
void quant_q4_1(const float* src, void* dst, int64_t nb) {
    auto* y = static_cast<block_q4_1*>(dst);
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
        const auto [mn, mx] = std::minmax_element(src, src + kQK);
        const float min = *mn, d = (*mx - *mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        for (int j = 0; j < 16; ++j) {
            const uint8_t lo = trunc_clamp((src[j] - min) * id + 0.5f, 15);
            const uint8_t hi = trunc_clamp((src[j + 16] - min) * id + 0.5f, 15);
            y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

void dequant_q5_0(const void* src, float* dst, int64_t nb) {
    const auto* x = static_cast<const block_q5_0*>(src);
    for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = half_to_float(x[i].d);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; ++j) {
            const int q0 = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int q1 = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = static_cast<float>(q0 - 16) * d;
            dst[j + 16] = static_cast<float>(q1 - 16) * d;
        }
    }
}

// Packs 32 five-bit values into the Q5 nibble + qh layout.
static void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        qh |= static_cast<uint32_t>(q[j] >> 4) << j;
        qh |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
    }
    std::memcpy(qh_bytes, &qh, 4);
}

void quant_q5_0(const float* src, void* dst, int64_t nb) {
    auto* y = static_cast<block_q5_0*>(dst);
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
        const float d = signed_absmax(src, kQK) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp(src[j] * id + 16.5f, 31);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void dequant_q5_1(const void* src, float* dst, int64_t nb) {
    const auto* x = static_cast<const block_q5_1*>(src);
    for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = half_to_float(x[i].d), m = half_to_float(x[i].m);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < 16; ++j) {
            const int q0 = (x[i].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
            const int q1 = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = static_cast<float>(q0) * d + m;
            dst[j + 16] = static_cast<float>(q1) * d + m;
        }
    }
}
void quant_q5_1(const float* src, void* dst, int64_t nb) {
    auto* y = static_cast<block_q5_1*>(dst);
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
        const auto [mn, mx] = std::minmax_element(src, src + kQK);
        const float min = *mn, d = (*mx - *mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        uint8_t q[kQK];
        for (int j = 0; j < kQK; ++j) q[j] = trunc_clamp((src[j] - min) * id + 0.5f, 31);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

void dequant_q8_0(const void* src, float* dst, int64_t nb) {
    const auto* x = static_cast<const block_q8_0*>(src);
    for (int64_t i = 0; i < nb; ++i, dst += kQK) {
        const float d = half_to_float(x[i].d);
        for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}
void quant_q8_0(const float* src, void* dst, int64_t nb) {
    auto* y = static_cast<block_q8_0*>(dst);
    for (int64_t i = 0; i < nb; ++i, src += kQK) {
        float amax = 0.0f;
        for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(src[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < kQK; ++j) {
            // roundf (half away from zero) as ggml; |src*id| <= 127 up to rounding.
            const float v = std::fmin(std::fmax(src[j] * id, -127.0f), 127.0f);
            y[i].qs[j] = static_cast<int8_t>(std::round(v));
        }
    }
}

}  // namespace strata::quant_detail
