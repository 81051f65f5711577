// Ops that also quantize what they write for the integer products that read it next: an
// RMS norm (plain, after a residual add, after a MoE layer's combine and residual add, or
// gated) or a SwiGLU with the activation quantizer in the same kernel.
// A decode step's quantize_act launches cost a few microseconds each on a card whatever
// their size (about 2.5 us on an H200, 19 of them per token of a 4-layer Qwen3-Next); here
// they are gone. The floats written are those of the plain op (rows.cuh: the same
// expressions and block sizes, so the same sums) and the digits those of quantize_act
// (act_quant.cuh), which tests/gpu checks byte for byte.
#include "engine/core/error.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/rows.cuh"
#include "kernels/cuda/fused.cuh"

namespace strata::gpu {

namespace {

using rows::row;

constexpr int kThreads = 128;  // swiglu_q's: a thread per value

// A block per row: norm_q_row.
template <Addend A>
__global__ void __launch_bounds__(rows::kNormThreads, 1) rms_norm_q_k(Rows x, Rows a, MoeCombine c, Rows out, const float* w, float eps, Rows y, ActQ q) {
    __shared__ float red[32];
    norm_q_row<A>(x, a, c, out, w, eps, y, q, blockIdx.x, red);
}

// rms_norm_gated_k (one block per head of a row, in place), the head quantized likewise
// (a head a multiple of 32 values: its blocks are the row's).
__global__ void rms_norm_gated_q_k(Rows x, Rows z, const float* w, int64_t head, float eps, ActQ a) {
    __shared__ float red[32];
    const int64_t t = blockIdx.y, c0 = blockIdx.x * head;
    gated_norm_q_head(row(x, t) + c0, row(z, t) + c0, w, head, eps, a, t, c0, red);
}

// quantize_act_k's grid, each thread's value the SwiGLU of its g and u (y may be g or u:
// a thread reads its own value before it writes; those past the end store nothing).
__global__ void swiglu_q_k(Rows g, Rows u, Rows y, ActQ a) {
    const ValueSlot s = value_slot(a);
    swiglu_q_value(row(g, s.t), row(u, s.t), row(y, s.t), s.k, s.in, a, s.t, s.b);
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

}  // namespace

ActQ rms_norm_q(Rows x, const float* w, float eps, Rows y, void* scratch, Stream s) {
    STRATA_CHECK(x.cols % 32 == 0, "rms_norm_q: {} values per row, not a multiple of 32", x.cols);
    const ActQ a = act_q_at(scratch, x.cols, x.rows);
    if (x.rows == 0) return a;
    launch(rms_norm_q_k<Addend::None>, dim3(static_cast<unsigned>(x.rows)), dim3(rows::kNormThreads), st(s), x, Rows{},
           MoeCombine{}, Rows{}, w, eps, y, a);
    check_launch("rms_norm_q");
    return a;
}

ActQ add_rms_norm_q(Rows x, Rows a, const float* w, float eps, Rows y, void* scratch, Stream s) {
    STRATA_CHECK(x.cols % 32 == 0 && a.cols == x.cols && a.rows == x.rows, "add_rms_norm_q: rows of {} and {} values",
                 x.cols, a.cols);
    const ActQ q = act_q_at(scratch, x.cols, x.rows);
    if (x.rows == 0) return q;
    launch(rms_norm_q_k<Addend::Rows>, dim3(static_cast<unsigned>(x.rows)), dim3(rows::kNormThreads), st(s), x, a,
           MoeCombine{}, Rows{}, w, eps, y, q);
    check_launch("add_rms_norm_q");
    return q;
}

ActQ moe_combine_add_rms_norm_q(const MoeCombine& c, Rows out, Rows x, const float* w, float eps, Rows y,
                                void* scratch, Stream s) {
    STRATA_CHECK(x.cols % 32 == 0 && out.cols == x.cols && out.rows == x.rows && c.h.rows == x.rows,
                 "moe_combine_add_rms_norm_q: rows of {} and {} values", x.cols, out.cols);
    const ActQ q = act_q_at(scratch, x.cols, x.rows);
    if (x.rows == 0) return q;
    launch(rms_norm_q_k<Addend::Combine>, dim3(static_cast<unsigned>(x.rows)), dim3(rows::kNormThreads), st(s), x,
           Rows{}, c, out, w, eps, y, q);
    check_launch("moe_combine_add_rms_norm_q");
    return q;
}

ActQ rms_norm_gated_q(Rows x, Rows z, const float* w, int64_t head, float eps, void* scratch, Stream s) {
    STRATA_CHECK(head % 32 == 0 && x.cols % head == 0, "rms_norm_gated_q: heads of {} values in rows of {}", head,
                 x.cols);
    const ActQ a = act_q_at(scratch, x.cols, x.rows);
    if (x.rows == 0) return a;
    launch(rms_norm_gated_q_k, dim3(static_cast<unsigned>(x.cols / head), static_cast<unsigned>(x.rows)),
           dim3(rows::kHeadThreads), st(s), x, z, w, head, eps, a);
    check_launch("rms_norm_gated_q");
    return a;
}

ActQ swiglu_q(Rows g, Rows u, Rows y, void* scratch, Stream s) {
    STRATA_CHECK(y.cols % 32 == 0, "swiglu_q: {} values per row, not a multiple of 32", y.cols);
    const ActQ a = act_q_at(scratch, y.cols, y.rows);
    const int64_t values = y.rows * y.cols;  // a thread each
    if (values == 0) return a;
    launch(swiglu_q_k, dim3(static_cast<unsigned>((values + kThreads - 1) / kThreads)), dim3(kThreads), st(s), g, u,
           y, a);
    check_launch("swiglu_q");
    return a;
}

}  // namespace strata::gpu
