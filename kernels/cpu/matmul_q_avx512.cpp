// The avx512 path of the integer-dot matmul; the code is matmul_q_simd.inc. Every header
// is included before the target pragma so no inline function from them is compiled
// for avx512 (the linker could otherwise pick that copy for the whole program).
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
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*() (`__m512 __Y = __Y;`),
// which -Wmaybe-uninitialized reports at -O3 wherever they inline.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,bmi2,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include <immintrin.h>

#define KQ_NS avx512
#define KQ_VNNI 1
#include "kernels/cpu/matmul_q_simd.inc"

#pragma GCC pop_options

namespace strata::kq {
void rows_avx512(const Job& job, int64_t r0, int64_t r1) {
    const GgmlType t = job.w->type;
    if (job.w->packed && (t == GgmlType::IQ3_XXS || t == GgmlType::IQ3_S || t == GgmlType::IQ2_XXS || t == GgmlType::IQ2_XS ||
                          t == GgmlType::IQ2_S) &&
        vbmi_usable())
        return rows_grid_vbmi(job, r0, r1);
    avx512::run_rows(job, r0, r1);
}
}  // namespace strata::kq
