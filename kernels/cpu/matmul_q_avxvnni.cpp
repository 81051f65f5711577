// The avx-vnni path of the integer-dot matmul: the AVX2 kernels of matmul_q_simd.inc with
// AVX-VNNI's vpdpbusd (256-bit, VEX) forming their integer sums. Every header
// is included before the target pragma so no inline function from them is compiled
// for avx-vnni (the linker could otherwise pick that copy for the whole program).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cpu/matmul_q.h"

#pragma GCC push_options
// GCC contracts a * b + c into an FMA by default in C++ (-ffp-contract=fast, even with
// -std=c++20) when the target has FMA, which AVX-512 implies: the canonical order needs
// a separate multiply and add, as the scalar path does.
#pragma GCC optimize("fp-contract=off")
#pragma GCC target("avx2,bmi2,f16c,avxvnni")
#include <immintrin.h>

#define KQ_NS avxvnni
#define KQ_VNNI 0
#define KQ_AVXVNNI 1
#include "kernels/cpu/matmul_q_simd.inc"

#pragma GCC pop_options

namespace strata::kq {
void rows_avxvnni(const Job& job, int64_t r0, int64_t r1) { avxvnni::run_rows(job, r0, r1); }
}  // namespace strata::kq
