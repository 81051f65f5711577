// Row-wise and elementwise ops: norms, adds, SwiGLU, copies, the Gated DeltaNet gates and
// conv1d, MoE routing and combine. One block per row (or per head of a row) where a row
// is reduced; a grid over (columns, rows) where it is not.
#include <cmath>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/rows.cuh"
#include "kernels/cuda/topk.cuh"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;  // a multiple of every warp size (32, 64)

using rows::row;
using rows::sigmoidf_;
using rows::siluf_;

dim3 grid_cols(const Rows& x) {
    return dim3(static_cast<unsigned>((x.cols + kThreads - 1) / kThreads), static_cast<unsigned>(x.rows));
}

__global__ void __launch_bounds__(rows::kNormThreads, 1) rms_norm_k(Rows x, const float* w, float eps, Rows y) {
    __shared__ float red[32];
    const float* xr = row(x, blockIdx.x);
    float* yr = row(y, blockIdx.x);
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) ss += xr[i] * xr[i];
    const float scale = rows::rms_scale(block_sum(ss, red), x.cols, eps);
    for (int64_t i = threadIdx.x; i < x.cols; i += blockDim.x) yr[i] = rows::normed(xr[i], scale, w, i);
}

// One block per (row, head): x_h = rms_norm(x_h) * w * silu(z_h).
__global__ void rms_norm_gated_k(Rows x, Rows z, const float* w, int64_t head, float eps) {
    __shared__ float red[32];
    float* xh = row(x, blockIdx.y) + blockIdx.x * head;
    const float* zh = row(z, blockIdx.y) + blockIdx.x * head;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) ss += xh[i] * xh[i];
    const float scale = rows::rms_scale(block_sum(ss, red), head, eps);
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) xh[i] = rows::gated(xh[i], scale, w[i], zh[i]);
}

__global__ void l2_norm_k(Rows x, int64_t col0, int64_t head, float eps, float scale) {
    __shared__ float red[32];
    float* v = row(x, blockIdx.y) + col0 + blockIdx.x * head;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) ss += v[i] * v[i];
    const float inv = 1.0f / fmaxf(sqrtf(block_sum(ss, red)), eps);
    for (int64_t i = threadIdx.x; i < head; i += blockDim.x) v[i] = v[i] * inv * scale;
}

__global__ void add_k(Rows y, Rows x) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < y.cols) row(y, blockIdx.y)[i] += row(x, blockIdx.y)[i];
}

__global__ void swiglu_k(Rows g, Rows u, Rows y) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < y.cols) row(y, blockIdx.y)[i] = rows::swiglu(row(g, blockIdx.y)[i], row(u, blockIdx.y)[i]);
}

__global__ void copy_k(Rows dst, Rows src) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < dst.cols) row(dst, blockIdx.y)[i] = row(src, blockIdx.y)[i];
}

__global__ void gdn_gates_k(Rows ba, int64_t nk, int64_t nv, bool tiled, const float* a, const float* dt_bias, Rows beta,
                            Rows g) {
    const int64_t h = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (h >= nv) return;
    rows::gdn_gate(row(ba, blockIdx.y), h, nk, nv, tiled, a, dt_bias, row(beta, blockIdx.y)[h], row(g, blockIdx.y)[h]);
}

// One thread per channel, over all the rows in order: the window slides over
// [history ; rows], and the last K-1 inputs become the history. With n_heads > 0 (the
// GDN's conv step, Ops::gdn_conv) the first 2 n_heads heads of `head` channels are
// L2-normed as l2_norm_k norms them (the first n_heads times q_scale): a block of kThreads
// per head (thread i the head's channel i, head <= kThreads), each row's outputs summed
// by the block as l2_norm_k sums them (one value per thread), so the same floats; the
// channels after them (all of them with n_heads = 0) in blocks of kThreads, not normed.
constexpr int kMaxConvK = 8;
__global__ void conv1d_silu_k(Rows x, const float* w, int64_t K, float* state, Rows u, int64_t n_heads, int64_t head,
                              float eps, float q_scale) {
    __shared__ float red[32];
    const int64_t b = blockIdx.x, cd = x.cols;
    const bool normed = b < 2 * n_heads;
    const bool live = normed ? threadIdx.x < head : true;
    const int64_t c = normed ? b * head + threadIdx.x : 2 * n_heads * head + (b - 2 * n_heads) * blockDim.x + threadIdx.x;
    const bool on = live && c < cd;
    const float scale = b < n_heads ? q_scale : 1.0f;
    float win[kMaxConvK];  // the K inputs the current row's output reads, oldest first
    if (on)
        for (int64_t j = 0; j < K - 1; ++j) win[j] = state[j * cd + c];
    for (int64_t t = 0; t < x.rows; ++t) {
        float v = 0.0f;
        if (on) {
            win[K - 1] = row(x, t)[c];
            float s = 0.0f;
            for (int64_t j = 0; j < K; ++j) s += w[c * K + j] * win[j];
            v = siluf_(s);
            for (int64_t j = 0; j + 1 < K; ++j) win[j] = win[j + 1];
        }
        if (normed) {  // the whole block or none of it: block_sum's barriers
            const float inv = 1.0f / fmaxf(sqrtf(block_sum(v * v, red)), eps);
            v = v * inv * scale;
        }
        if (on) row(u, t)[c] = v;
    }
    if (on)
        for (int64_t j = 0; j < K - 1; ++j) state[j * cd + c] = win[j];
}

// One warp per row (topk.cuh).
__global__ void topk_softmax_k(Rows logits, int64_t k, int32_t* ids, float* wt) {
    topk::route_row(row(logits, blockIdx.x), logits.cols, k, ids + blockIdx.x * k, wt + blockIdx.x * k, true);
}

// Blocks of kCombineCols outputs per row (grid (columns, rows)): a block per row left a
// decode step's 2048 outputs to one SM, each thread with k dependent rounds (12 us on an
// H200). Each block sums the shared expert's gate itself (the same sum in every block).
__global__ void moe_combine_k(MoeCombine c, Rows out) {
    __shared__ float red[32];
    const int64_t t = blockIdx.y, i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const float gate = c.shared_gate ? sigmoidf_(block_sum(rows::shared_gate_part(c, t), red)) : 1.0f;
    if (i < out.cols) row(out, t)[i] = rows::combined(c, t, i, gate);
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

}  // namespace

void rms_norm(Rows x, const float* w, float eps, Rows y, Stream s) {
    if (x.rows == 0) return;
    launch(rms_norm_k, dim3(static_cast<unsigned>(x.rows)), dim3(rows::kNormThreads), st(s), x, w, eps, y);
    check_launch("rms_norm");
}

void rms_norm_gated(Rows x, Rows z, const float* w, int64_t head, float eps, Stream s) {
    if (x.rows == 0) return;
    launch(rms_norm_gated_k, dim3(static_cast<unsigned>(x.cols / head), static_cast<unsigned>(x.rows)), dim3(rows::kHeadThreads),
           st(s), x, z, w, head, eps);
    check_launch("rms_norm_gated");
}

void l2_norm(Rows x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale, Stream s) {
    if (x.rows == 0 || n_heads == 0) return;
    launch(l2_norm_k, dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(x.rows)), dim3(kThreads), st(s), x,
           col0, head, eps, scale);
    check_launch("l2_norm");
}

void add(Rows y, Rows x, Stream s) {
    if (y.rows == 0 || y.cols == 0) return;
    launch(add_k, grid_cols(y), dim3(kThreads), st(s), y, x);
    check_launch("add");
}

void swiglu(Rows g, Rows u, Rows y, Stream s) {
    if (y.rows == 0 || y.cols == 0) return;
    launch(swiglu_k, grid_cols(y), dim3(kThreads), st(s), g, u, y);
    check_launch("swiglu");
}

void copy(Rows dst, Rows src, Stream s) {
    if (dst.rows == 0 || dst.cols == 0) return;
    if (dst.ld == dst.cols && src.ld == src.cols) {  // one block of memory: the copy engine
        copy_async(dst.p, src.p, sizeof(float) * static_cast<size_t>(dst.cols * dst.rows), s);
        return;
    }
    launch(copy_k, grid_cols(dst), dim3(kThreads), st(s), dst, src);
    check_launch("copy");
}

void gdn_gates(Rows ba, int64_t nk, int64_t nv, bool tiled, const float* a, const float* dt_bias, Rows beta, Rows g,
               Stream s) {
    if (ba.rows == 0) return;
    launch(gdn_gates_k, dim3(static_cast<unsigned>((nv + kThreads - 1) / kThreads), static_cast<unsigned>(ba.rows)),
           dim3(kThreads), st(s), ba, nk, nv, tiled, a, dt_bias, beta, g);
    check_launch("gdn_gates");
}

namespace {

void launch_conv(Rows x, const float* w, int64_t K, float* conv_state, Rows u, int64_t n_heads, int64_t head, float eps,
                 float q_scale, Stream s) {
    STRATA_CHECK(K >= 1 && K <= kMaxConvK, "conv1d: kernel size {} (the GPU kernel takes up to {})", K, kMaxConvK);
    const int64_t plain = x.cols - 2 * n_heads * head;  // channels not normed
    const auto blocks = static_cast<unsigned>(2 * n_heads + (plain + kThreads - 1) / kThreads);
    launch(conv1d_silu_k, dim3(blocks), dim3(kThreads), st(s), x, w, K, conv_state, u, n_heads, head, eps, q_scale);
    check_launch("conv1d_silu");
}

}  // namespace

void conv1d_silu(Rows x, const float* w, int64_t K, float* conv_state, Rows u, Stream s) {
    launch_conv(x, w, K, conv_state, u, 0, 0, 0.0f, 1.0f, s);
}

bool gdn_conv(Rows x, const float* w, int64_t K, float* conv_state, Rows u, int64_t n_heads, int64_t head, float eps,
              float q_scale, Stream s) {
    if (head > kThreads) return false;
    launch_conv(x, w, K, conv_state, u, n_heads, head, eps, q_scale, s);
    return true;
}

void topk_softmax(Rows logits, int64_t k, int32_t* ids, float* wt, Stream s) {
    STRATA_CHECK(logits.cols <= kTopkMaxExperts && k <= logits.cols, "topk_softmax: {} of {} experts (up to {})", k,
                 logits.cols, kTopkMaxExperts);
    if (logits.rows == 0) return;
    launch(topk_softmax_k, dim3(static_cast<unsigned>(logits.rows)), dim3(static_cast<unsigned>(warp_size())), st(s),
           logits, k, ids, wt);
    check_launch("topk_softmax");
}

void moe_combine(const MoeCombine& c, Rows out, Stream s) {
    if (out.rows == 0) return;
    const dim3 grid(static_cast<unsigned>((out.cols + rows::kCombineCols - 1) / rows::kCombineCols),
                    static_cast<unsigned>(out.rows));
    launch(moe_combine_k, grid, dim3(rows::kCombineCols), st(s), c, out);
    check_launch("moe_combine");
}

}  // namespace strata::gpu
