// The scalar path of the integer-dot matmul (matmul_q.h): the plain statement of the
// canonical computation that the SIMD paths reproduce bit for bit.
#include <atomic>
#include <cstring>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cpu/matmul_q.h"

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
};

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
    case GgmlType::Q4_K: {
        const auto& x = sblock<block_q4_K>(row, i);
        const uint8_t* q = x.qs + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) k.w[l] = static_cast<int8_t>(j % 2 ? q[l] >> 4 : q[l] & 0xF);
        const uint8_t* s = x.scales;
        int sc, mn;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
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
            for (int v = 0; v < 4; ++v) {
                const int m = static_cast<int>((e >> (8 * v)) & 0xFF);
                k.w[4 * g + v] = static_cast<int8_t>((signs >> v) & 1 ? -m : m);
            }
        }
        k.ws = half_to_float(x.d) * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
        break;
    }
    default:
        fail("kq::decode: type {} has no integer path", type_info(type).name);
    }
}

}  // namespace

bool supported(GgmlType t) {
    switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
    case GgmlType::IQ3_XXS:
        return true;
    default:
        return false;
    }
}

Isa detected() {
    static const Isa isa = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("f16c"))
            return Isa::Avx512Vnni;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return Isa::Avx2;
        return Isa::Scalar;
    }();
    return isa;
}

Isa active() {
    const int f = g_forced.load(std::memory_order_relaxed);
    return f < 0 ? detected() : static_cast<Isa>(f);
}

void force(int isa) {
    STRATA_CHECK(isa < 0 || isa <= static_cast<int>(detected()), "kq::force: path {} not available", isa);
    g_forced.store(isa, std::memory_order_relaxed);
}

const char* name(Isa isa) {
    switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512Vnni: return "avx512-vnni";
    }
    return "?";
}

void rows_scalar(const Job& job, int64_t r0, int64_t r1) {
    const MatView& w = *job.w;
    const ActQ& x = *job.x;
    const bool has_min = w.type == GgmlType::Q4_K;
    Blk k;
    for (int64_t r = r0; r < r1; ++r) {
        for (int64_t t = 0; t < x.T; ++t) {
            const int8_t* xq = x.qt(t);
            const int8_t* xr = x.rt(t);
            float acc[8] = {};
            float mn = 0.0f;
            for (int64_t b = 0; b < x.nb; ++b) {
                decode(w.type, w.row(r), b, k);
                const float dx = x.dt(t)[b];
                const float s = k.ws * dx;
                for (int l = 0; l < 8; ++l) {
                    int32_t p = 0;
                    for (int i = 4 * l; i < 4 * l + 4; ++i)
                        p += int32_t{k.w[i]} * (128 * xq[32 * b + i] + xr[32 * b + i]);
                    p *= l < 4 ? k.m0 : k.m1;
                    acc[l] = acc[l] + s * static_cast<float>(p);
                }
                if (has_min) mn = mn + (k.wm * dx) * static_cast<float>(x.st(t)[b]);
            }
            float y = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            if (has_min) y = y - mn;
            job.y[t * job.ldy + r] = y;
        }
    }
}

}  // namespace strata::kq
