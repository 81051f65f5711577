// Internal to kernels/cpu: matrix products of quantized weights with quantized
// activations (act_quant.h) by integer dot products, for Q8_0, Q4_0, Q4_K, Q6_K,
// IQ4_XS and IQ3_XXS. Three implementations (scalar, AVX2, AVX-512 VNNI) compute the
// same floats; see "Integer dot products" in docs/architecture.md.
//
// Canonical computation of y[t][r] (every path does exactly this, in this order):
// for each 32-value block b of the row, in index order, the weight block is decoded to
// 32 signed integers w (and a float scale ws, for Q4_K also a float minimum wm, for Q6_K
// two integer sub-scales m0, m1), and eight exact int32 lane sums are formed,
// p[l] = sum_{i=4l}^{4l+3} w[i] * (128 q[i] + r[i]) (times m0 for l < 4, m1 for l >= 4
// on Q6_K; |p| < 2^31 always, and float(p) rounds to nearest on every path);
// then with s = ws * d_x[b]:  acc[l] = acc[l] + s * float(p[l])  (a multiply then an add,
// never fused), and for Q4_K  mn = mn + (wm * d_x[b]) * float(sum_x[b]).
// Finally y = ((acc0+acc4) + (acc2+acc6)) + ((acc1+acc5) + (acc3+acc7))  [- mn for Q4_K].
#pragma once
#include <cstdint>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul.h"

namespace strata::kq {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512Vnni = 2 };

bool supported(GgmlType t);
Isa detected();          // the best path this CPU runs
Isa active();            // detected(), unless forced
// Tests: force a path (must be <= detected()), or -1 to go back to detection.
void force(int isa);
const char* name(Isa isa);

struct Job {
    const MatView* w;
    const ActQ* x;
    float* y;  // [x->T, ldy]
    int64_t ldy;
};

// Rows [r0, r1) for every token of the job.
void rows_scalar(const Job& job, int64_t r0, int64_t r1);
void rows_avx2(const Job& job, int64_t r0, int64_t r1);
void rows_avx512(const Job& job, int64_t r0, int64_t r1);

}  // namespace strata::kq
