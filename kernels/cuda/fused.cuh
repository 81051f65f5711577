// The bodies of three fused ops (fused.cu) that other kernels also run in their last
// blocks, so that both give the same bytes: a value of the SwiGLU quantized for the down
// product (swiglu_q; the experts' gate and up by id, matmul_ids_swiglu_q in matmul_q.cu),
// a head of the gated RMS norm quantized for the out projection (rms_norm_gated_q; the GDN
// recurrence, gdn_recurrent's norm in gdn.cu) and a row's RMS norm after a residual add
// (add_rms_norm_q; a decode step's out projection, matmul_add_rms_norm_q in matmul_q.cu).
// Their inputs are read through volatile loads: in those kernels other blocks wrote them
// during the kernel.
#pragma once
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/rows.cuh"

namespace strata::gpu {

// What norm_q_row adds to x's values before the norm: nothing, a row of a (add's
// x += a), or a MoE layer's combined output (moe_combine's value, also stored in out).
enum class Addend { None, Rows, Combine };

// Row t of x (plus the addend, each value added by the thread that then squares it, as
// rms_norm_k's thread for it: the same sum) normed into y with w, then the row's values in
// rounds of blockDim.x (whole 32-value blocks each: x.cols and blockDim.x are multiples of
// 32), each quantized into q as it is written. A block of rows::kNormThreads threads, every
// one calling it (block_sum's barriers). y may be x, or (Combine) c.h: each row's gate is
// summed before the row is written.
template <Addend A>
STRATA_DEV void norm_q_row(Rows x, Rows a, const MoeCombine& c, Rows out, const float* w, float eps, Rows y,
                           const ActQ& q, int64_t t, float* red) {
    float* xr = rows::row(x, t);
    float* yr = rows::row(y, t);
    float gate = 1.0f;
    if constexpr (A == Addend::Combine)
        if (c.shared_gate) gate = rows::sigmoidf_(block_sum(rows::shared_gate_part(c, t), red));
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) {
        float v = xr[i];
        if constexpr (A == Addend::Rows) xr[i] = v = v + static_cast<const volatile float*>(rows::row(a, t))[i];
        if constexpr (A == Addend::Combine) {
            const float m = rows::combined(c, t, i, gate);
            rows::row(out, t)[i] = m;
            xr[i] = v = v + m;
        }
        ss += v * v;
    }
    const float scale = rows::rms_scale(block_sum(ss, red), x.cols, eps);
    for (int64_t i0 = 0; i0 < x.cols; i0 += blockDim.x) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < x.cols;
        const float v = in ? rows::normed(xr[i], scale, w, i) : 0.0f;
        if (in) yr[i] = v;
        quant_value(v, static_cast<int>(threadIdx.x % 32), in, q, t, i / 32);
    }
}

// Value k of 32-value block b of row t: y = swiglu(g, u) (y may be g or u: the value is
// read before it is written) and its digits in a. Every thread of the warp calls it (see
// quant_value); `in` false: it stores nothing.
STRATA_DEV void swiglu_q_value(const float* g, const float* u, float* y, int k, bool in, const ActQ& a, int64_t t,
                               int64_t b) {
    const int64_t c = 32 * b + k;
    const float v = rows::swiglu(static_cast<const volatile float*>(g)[c], static_cast<const volatile float*>(u)[c]);
    if (in) y[c] = v;
    quant_value(v, k, in, a, t, b);
}

// Head c0 / head of row t: x = rms_norm(x) * w * silu(z) in place (x and z: the head's
// values), quantized into a; a block of rows::kHeadThreads threads, every one calling it
// (block_sum's barriers), as rms_norm_gated_q_k's block for the head. head: a multiple of 32.
STRATA_DEV void gated_norm_q_head(float* xh, const float* zh, const float* w, int64_t head, float eps, const ActQ& a,
                                  int64_t t, int64_t c0, float* red) {
    const volatile float* xv = xh;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) ss += xv[i] * xv[i];
    const float scale = rows::rms_scale(block_sum(ss, red), head, eps);
    for (int64_t i0 = 0; i0 < head; i0 += blockDim.x) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < head;
        const float v = in ? rows::gated(xv[i], scale, w[i], zh[i]) : 0.0f;
        if (in) xh[i] = v;
        quant_value(v, static_cast<int>(threadIdx.x % 32), in, a, t, (c0 + i) / 32);
    }
}

}  // namespace strata::gpu
