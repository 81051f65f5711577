// The Gated DeltaNet recurrence (MODEL_SPEC 4.4), token by token: one block per value
// head, one thread per row of the head's state (a value index: dk key values, stored
// transposed as the CPU backend keeps them), so each row evolves on its own through a
// token's update, in the CPU kernel's order (kernels/cpu/gdn_step.cpp).
#include <cmath>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

constexpr int kMaxDk = 256;

__global__ void gdn_recurrent_k(int64_t nk, int64_t nv, int64_t dk, int64_t dv, bool tiled, Rows u, Rows g, Rows beta,
                                float* state, Rows o) {
    __shared__ float qs[kMaxDk];
    __shared__ float ks[kMaxDk];
    const int64_t h = blockIdx.x, kh = tiled ? h % nk : h / (nv / nk);
    const int64_t key_dim = nk * dk;
    for (int64_t t = 0; t < u.rows; ++t) {
        const float* ut = u.p + t * u.ld;
        __syncthreads();  // the previous token's q and k are read by every thread
        for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
            qs[i] = ut[kh * dk + i];
            ks[i] = ut[key_dim + kh * dk + i];
        }
        __syncthreads();
        const float e = expf(g.p[t * g.ld + h]), b = beta.p[t * beta.ld + h];
        for (int64_t j = threadIdx.x; j < dv; j += blockDim.x) {
            float* row = state + (h * dv + j) * dk;
            float m = 0.0f;
            for (int64_t i = 0; i < dk; ++i) {
                const float r = row[i] * e;
                row[i] = r;
                m += r * ks[i];
            }
            const float delta = b * (ut[2 * key_dim + h * dv + j] - m);
            float out = 0.0f;
            for (int64_t i = 0; i < dk; ++i) {
                const float r = row[i] + ks[i] * delta;
                row[i] = r;
                out += r * qs[i];
            }
            o.p[t * o.ld + h * dv + j] = out;
        }
    }
}

}  // namespace

void gdn_recurrent(int64_t nk, int64_t nv, int64_t dk, int64_t dv, bool tiled, Rows u, Rows g, Rows beta, float* state,
                   Rows o, Stream s) {
    STRATA_CHECK(dk <= kMaxDk, "gdn: key head size {} (the GPU kernel takes up to {})", dk, kMaxDk);
    if (u.rows == 0) return;
    launch(gdn_recurrent_k, dim3(static_cast<unsigned>(nv)), dim3(128), static_cast<gpuStream_t>(s), nk, nv, dk, dv,
           tiled, u, g, beta, state, o);
    check_launch("gdn_recurrent");
}

}  // namespace strata::gpu
