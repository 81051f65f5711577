// A value of the SwiGLU of gate and up rows, quantized for the down product as it is
// written: shared by swiglu_q (fused.cu, a thread per value) and the experts' gate and up
// by id, whose last block to finish each 32 outputs of a row finishes them
// (matmul_q.cu, matmul_ids_swiglu_q), so that both give the same bytes.
#pragma once
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/rows.cuh"

namespace strata::gpu {

// Value k of 32-value block b of row t: y = swiglu(g, u) (y may be g or u: the value is
// read before it is written) and its digits in a. Every thread of the warp calls it (see
// quant_value); `in` false: it stores nothing. g and u are read through volatile loads:
// in matmul_ids_swiglu_q other blocks wrote them during the kernel.
STRATA_DEV void swiglu_q_value(const float* g, const float* u, float* y, int k, bool in, const ActQ& a, int64_t t,
                               int64_t b) {
    const int64_t c = 32 * b + k;
    const float v = rows::swiglu(static_cast<const volatile float*>(g)[c], static_cast<const volatile float*>(u)[c]);
    if (in) y[c] = v;
    quant_value(v, k, in, a, t, b);
}

}  // namespace strata::gpu
