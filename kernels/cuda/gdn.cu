// The Gated DeltaNet recurrence (MODEL_SPEC 4.4), token by token: blocks of a value
// head's rows, one warp per row of the head's state (a value index j: dk key values, stored
// transposed as the CPU backend keeps them), its lanes holding the row's values i = lane,
// lane + warpSize, ... in registers for the whole window. A row is then read and written
// once per window, in runs a warp reads together, and each token's two sums over i are
// warp sums (a fixed order: a row's result does not depend on the window it came in).
#include <cmath>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/fused.cuh"
#include "kernels/cuda/rows.cuh"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxDk = 256;
constexpr int kMaxPerLane = kMaxDk / 32;  // 32 lanes or more

static_assert(sizeof(GdnGateArgs) == sizeof(Rows) + 16, "no padding in kernel arguments");

static_assert(kThreads == rows::kHeadThreads, "the norm's last block is rms_norm_gated_q's block for the head");
static_assert(sizeof(GdnNormArgs) == sizeof(Rows) + 16 + sizeof(ActQ) + 8, "no padding in kernel arguments");

// Norm: then the last of a head's blocks to finish (they count themselves in
// norm.counters[h], fenced after their stores) runs rms_norm_gated_q's block for the head
// on each row (fused.cuh), so that the launch replaces that one.
template <bool Norm = false>
__global__ void gdn_recurrent_k(int64_t nk, int64_t nv, int64_t dk, int64_t dv, bool tiled, Rows u, Rows g, Rows beta,
                                float* state, Rows o, GdnGateArgs gates, GdnNormArgs norm) {
    const int64_t h = blockIdx.x, kh = tiled ? h % nk : h / (nv / nk);
    const int64_t key_dim = nk * dk;
    const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
    const int n_warps = static_cast<int>(blockDim.x) / warpSize;
    // Every warp runs the same number of rounds (a CPU HIP runtime's shuffles wait for
    // the whole block); a warp past the last row computes nothing and stores nothing.
    for (int64_t j0 = static_cast<int64_t>(blockIdx.y) * n_warps; j0 < dv; j0 += static_cast<int64_t>(gridDim.y) * n_warps) {
        const int64_t j = j0 + warp;
        const bool active = j < dv;
        float* row = state + (h * dv + (active ? j : 0)) * dk;
        float r[kMaxPerLane];
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t i = lane + static_cast<int64_t>(c) * warpSize;
            r[c] = active && i < dk ? row[i] : 0.0f;
        }
        for (int64_t t = 0; t < u.rows; ++t) {
            const float* ut = u.p + t * u.ld;
            float gt, b;
            if (gates.ba.p) {  // the gates here (the first block of the head stores them)
                rows::gdn_gate(gates.ba.p + t * gates.ba.ld, h, nk, nv, tiled, gates.a, gates.dt_bias, b, gt);
                if (blockIdx.y == 0 && threadIdx.x == 0) beta.p[t * beta.ld + h] = b, g.p[t * g.ld + h] = gt;
            } else {
                gt = g.p[t * g.ld + h], b = beta.p[t * beta.ld + h];
            }
            const float e = expf(gt);
            float kv[kMaxPerLane];
            float m = 0.0f;
            for (int c = 0; c < kMaxPerLane; ++c) {
                const int64_t i = lane + static_cast<int64_t>(c) * warpSize;
                kv[c] = i < dk ? ut[key_dim + kh * dk + i] : 0.0f;
                r[c] *= e;
                m += r[c] * kv[c];
            }
            m = warp_sum(m);
            const float delta = b * ((active ? ut[2 * key_dim + h * dv + j] : 0.0f) - m);
            float out = 0.0f;
            for (int c = 0; c < kMaxPerLane; ++c) {
                const int64_t i = lane + static_cast<int64_t>(c) * warpSize;
                r[c] += kv[c] * delta;
                out += i < dk ? r[c] * ut[kh * dk + i] : 0.0f;
            }
            out = warp_sum(out);
            if (active && lane == 0) o.p[t * o.ld + h * dv + j] = out;
        }
        for (int c = 0; c < kMaxPerLane; ++c) {
            const int64_t i = lane + static_cast<int64_t>(c) * warpSize;
            if (active && i < dk) row[i] = r[c];
        }
    }
    if constexpr (Norm) {
        __shared__ unsigned done;
        __shared__ float red[32];
        if (!last_to_finish(norm.counters + h, gridDim.y, done)) return;
        for (int64_t t = 0; t < o.rows; ++t)
            gated_norm_q_head(o.p + t * o.ld + h * dv, norm.z.p + t * norm.z.ld + h * dv, norm.w, dv, norm.eps, norm.a,
                              t, h * dv, red);
    }
}

}  // namespace

ActQ gdn_recurrent(int64_t nk, int64_t nv, int64_t dk, int64_t dv, bool tiled, Rows u, Rows g, Rows beta, float* state,
                   Rows o, Stream s, const GdnGateArgs& gates, const GdnNormArgs& norm, void* scratch) {
    STRATA_CHECK(dk <= kMaxDk, "gdn: key head size {} (the GPU kernel takes up to {})", dk, kMaxDk);
    if (u.rows == 0) return norm.w ? act_q_at(scratch, o.cols, o.rows) : ActQ{};
    const int64_t rows_per_block = kThreads / warp_size();  // a warp per state row
    const dim3 grid(static_cast<unsigned>(nv), static_cast<unsigned>((dv + rows_per_block - 1) / rows_per_block));
    STRATA_CHECK(!gates.ba.p || gates.ba.rows == u.rows, "gdn: {} rows of gates for {} rows", gates.ba.rows, u.rows);
    if (!norm.w) {
        launch(gdn_recurrent_k<false>, grid, dim3(kThreads), static_cast<gpuStream_t>(s), nk, nv, dk, dv, tiled, u, g,
               beta, state, o, gates, GdnNormArgs{});
        check_launch("gdn_recurrent");
        return {};
    }
    STRATA_CHECK(dv % 32 == 0 && norm.z.rows == o.rows && norm.counters, "gdn: the gated norm of heads of {} values", dv);
    GdnNormArgs n = norm;
    n.a = act_q_at(scratch, o.cols, o.rows);
    launch(gdn_recurrent_k<true>, grid, dim3(kThreads), static_cast<gpuStream_t>(s), nk, nv, dk, dv, tiled, u, g, beta,
           state, o, gates, n);
    check_launch("gdn_recurrent");
    return n.a;
}

}  // namespace strata::gpu
