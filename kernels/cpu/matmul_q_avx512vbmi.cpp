// Packed IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS and IQ2_S on AVX-512 VBMI and BITALG (matmul_q_simd_packed_k.inc,
// KQ_VBMI): their grid lookups as byte permutes instead of vpgatherdd / vpgatherdq, which
// AMD's cores run slowly, and their signs by vpshufbitqmb. A translation unit of its own because AVX-512 VNNI CPUs
// without them exist (Cascade Lake): only this code may use them, and rows_avx512 calls
// it only where the CPU has them (Ice Lake, Sapphire Rapids, Zen 4 and later do).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cpu/matmul_q.h"

namespace strata::kq {
namespace {
// Byte i of each of the 256 grid entries plus 128 (the VNNI bias; every byte is at most
// 62), as plane i (i < 4) of 256 bytes: the tables of the four byte permutes of a lookup.
const std::array<uint8_t, 1024>& iq3_planes() {
    static const std::array<uint8_t, 1024> planes = [] {
        std::array<uint8_t, 1024> a{};
        for (int e = 0; e < 256; ++e)
            for (int i = 0; i < 4; ++i)
                a[static_cast<size_t>(256 * i + e)] = static_cast<uint8_t>(((iq::kIq3xxsGrid[static_cast<size_t>(e)] >> (8 * i)) & 0xFF) + 128);
        return a;
    }();
    return planes;
}
// IQ2_XXS, IQ2_XS, IQ2_S: each grid entry's eight magnitudes {8, 25, 43} as 2-bit levels
// {0, 1, 2} (value v at bits 2 (v % 4) of byte v / 4 of a 16-bit code), as two planes of
// N bytes (the codes' low bytes: values 0..3; high bytes: values 4..7).
template <size_t N>
std::array<uint8_t, 2 * N> iq2_codes(const std::array<uint64_t, N>& grid) {
    std::array<uint8_t, 2 * N> a{};
    for (size_t e = 0; e < N; ++e)
        for (int v = 0; v < 8; ++v) {
            const auto m = (grid[e] >> (8 * v)) & 0xFF;
            const int level = m == 0x08 ? 0 : m == 0x19 ? 1 : 2;
            a[N * static_cast<size_t>(v / 4) + e] |= static_cast<uint8_t>(level << (2 * (v % 4)));
        }
    return a;
}
const std::array<uint8_t, 512>& iq2_code_planes() {
    static const std::array<uint8_t, 512> planes = iq2_codes(iq::kIq2xxsGrid);
    return planes;
}
const std::array<uint8_t, 1024>& iq2xs_code_planes() {
    static const std::array<uint8_t, 1024> planes = iq2_codes(iq::kIq2xsGrid);
    return planes;
}
const std::array<uint8_t, 2048>& iq2s_code_planes() {
    static const std::array<uint8_t, 2048> planes = iq2_codes(iq::kIq2sGrid);
    return planes;
}
// IQ3_S: each of the 512 grid entries' four magnitudes (1..15) as nibbles of a 16-bit
// code, as two 512-byte planes (low bytes: values 0 and 1; high bytes: values 2 and 3).
const std::array<uint8_t, 1024>& iq3s_code_planes() {
    static const std::array<uint8_t, 1024> planes = [] {
        std::array<uint8_t, 1024> a{};
        for (int e = 0; e < 512; ++e)
            for (int v = 0; v < 4; ++v) {
                const auto m = (iq::kIq3sGrid[static_cast<size_t>(e)] >> (8 * v)) & 0xF;
                a[static_cast<size_t>(512 * (v / 2) + e)] |= static_cast<uint8_t>(m << (4 * (v % 2)));
            }
        return a;
    }();
    return planes;
}
}  // namespace
}  // namespace strata::kq

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")  // as matmul_q_avx512.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,bmi2,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg")
#include <immintrin.h>

#define KQ_NS avx512vbmi
#define KQ_VNNI 1
#define KQ_VBMI 1
#include "kernels/cpu/matmul_q_simd.inc"

#pragma GCC pop_options

namespace strata::kq {
namespace {
std::atomic<bool> g_allow_vbmi{true};
}  // namespace

void allow_vbmi(bool on) { g_allow_vbmi.store(on, std::memory_order_relaxed); }

bool vbmi_usable() {
    static const bool ok = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg") &&
               __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }();
    return ok && g_allow_vbmi.load(std::memory_order_relaxed);
}
void rows_grid_vbmi(const Job& job, int64_t r0, int64_t r1) { avx512vbmi::run_grid(job, r0, r1); }
}  // namespace strata::kq
