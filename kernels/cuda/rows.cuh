// The per-value arithmetic of the row-wise ops (elementwise.cu), shared with the kernels
// that also quantize what they write (fused.cu): one expression for each, so that an op
// and its fused form store the same floats.
#pragma once
#include <cmath>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu::rows {

// Threads of a block per row (rms_norm) and per head (the gated norm). A decode step has
// one row, so the block alone reads it: 128 threads reading 2048 values take 16 rounds,
// each waiting on memory (14 us for an RMS norm on an H200); 512 take 4. A fused kernel
// uses the same counts, so its sums of squares are added in the same order. A kernel
// launched with kNormThreads threads says so (__launch_bounds__(kNormThreads, 1)): nvcc
// then keeps a thread within the 128 registers of an SM's 64K that a 512-thread block can
// have, where unbounded it may take more and the launch fail on the card (a CPU HIP
// runtime has no register file to show it). With it the fused products take at most 92
// on sm_90 and 84 on sm_86, without spills (ptxas -v; 74 unbounded); with a minimum of 2
// blocks an SM they took at most 64 and spilled.
constexpr int kNormThreads = 512;
constexpr int kHeadThreads = 128;

STRATA_DEV float* row(const Rows& x, int64_t r) { return x.p + r * x.ld; }
STRATA_DEV float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
STRATA_DEV float siluf_(float x) { return x / (1.0f + expf(-x)); }

// RMS norm: the scale from the sum of squares of n values, then each value (w may be null).
STRATA_DEV float rms_scale(float sum_sq, int64_t n, float eps) {
    return 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
}
STRATA_DEV float normed(float x, float scale, const float* w, int64_t i) { return w ? x * scale * w[i] : x * scale; }
// The gated norm's value: rms_norm(x) * w * silu(z).
STRATA_DEV float gated(float x, float scale, float w, float z) { return x * scale * w * siluf_(z); }
STRATA_DEV float swiglu(float g, float u) { return siluf_(g) * u; }
// MoE combine (gpu::MoeCombine): the shared expert's gate logit summed by the first
// kCombineCols threads of a block (any larger block sums the same: its other threads and
// warps add zeros, which block_sum adds last), then each output value.
constexpr int kCombineCols = 256;
STRATA_DEV float shared_gate_part(const MoeCombine& c, int64_t t) {
    float dot = 0.0f;
    if (c.shared_gate && threadIdx.x < kCombineCols)
        for (int64_t i = threadIdx.x; i < c.h.cols; i += kCombineCols) dot += c.shared_gate[i] * row(c.h, t)[i];
    return dot;
}
// Unrolled so that the k rows' loads go out together: one at a time, each waits on memory
// (a thread's k dependent rounds were most of the kernel's time on an H200). The rows are
// read through volatile loads: the down product's launch that wrote them may be this one
// (gpu::matmul_ids_combine_add_rms_norm_q).
STRATA_DEV float combined(const MoeCombine& c, int64_t t, int64_t i, float gate) {
    float y = 0.0f;
    STRATA_UNROLL(8)
    for (int64_t s = 0; s < c.k; ++s)
        y += c.wt[t * c.k + s] * static_cast<const volatile float*>(row(c.routed, t * c.k + s))[i];
    if (c.shared.p) y += gate * static_cast<const volatile float*>(row(c.shared, t))[i];
    return y;
}

// A GDN value head h's gates from its row of ba (engine/backend/ops.h gdn_gates): beta =
// sigmoid(b), g = a * softplus(alpha + dt_bias) (the log of the decay).
STRATA_DEV void gdn_gate(const float* bat, int64_t h, int64_t nk, int64_t nv, bool tiled, const float* a,
                         const float* dt_bias, float& beta, float& g) {
    const int64_t r = nv / nk, ib = tiled ? h : (h / r) * 2 * r + h % r, ia = tiled ? nv + h : ib + r;
    beta = sigmoidf_(bat[ib]);
    const float x = bat[ia] + dt_bias[h];
    g = a[h] * (x > 20.0f ? x : log1pf(expf(x)));
}

}  // namespace strata::gpu::rows
