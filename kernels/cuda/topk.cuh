// MoE routing of one row of router logits by one warp, shared by topk_softmax (a warp per
// row) and the router's product that routes in its last block (matmul.cu, matmul_topk), so
// that both give the same bits.
#pragma once
#include <cmath>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu::topk {

constexpr int kExpertSlots = kTopkMaxExperts / 32;  // per lane, at the narrowest warp

// The row's experts in the lanes' registers (expert e in lane e % warpSize, slot
// e / warpSize), softmax in place (p), then k passes of an arg-max over the untaken
// experts (ties: the lower index) by shuffles alone; lane 0 writes the ids and the
// renormalized weights. A block of 512 threads with three barriers per pass took 20 us
// for 10 of 512 experts on an H200. Every lane of the warp calls it (a CPU HIP runtime's
// shuffles wait for the whole block); `on` false: a warp without a row, which shuffles
// and writes nothing. p is read through volatile loads: in matmul_topk other blocks
// wrote it during this kernel.
STRATA_DEV void route_row(float* p, int64_t cols, int64_t k, int32_t* ids, float* wt, bool on) {
    const int X = on ? static_cast<int>(cols) : 0, lane = static_cast<int>(threadIdx.x % warpSize);
    const volatile float* pv = p;
    float v[kExpertSlots];
    float mx = -INFINITY;
    STRATA_UNROLL_ALL
    for (int i = 0; i < kExpertSlots; ++i) {
        const int e = i * warpSize + lane;
        v[i] = e < X ? pv[e] : -INFINITY;
        mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    STRATA_UNROLL_ALL
    for (int i = 0; i < kExpertSlots; ++i) {
        const int e = i * warpSize + lane;
        v[i] = e < X ? expf(v[i] - mx) : 0.0f;
        sum += v[i];
    }
    const float inv = 1.0f / warp_sum(sum);
    STRATA_UNROLL_ALL
    for (int i = 0; i < kExpertSlots; ++i) {
        const int e = i * warpSize + lane;
        if (e < X) p[e] = v[i] = v[i] * inv;
        else v[i] = -1.0f;  // never picked
    }
    uint32_t taken = 0;  // bit i: this lane's slot i
    float top = 0.0f;
    for (int64_t s = 0; s < k; ++s) {  // k passes in every warp of the block, with a row or not
        float bv = -1.0f;
        int bi = -1;
        STRATA_UNROLL_ALL
        for (int i = 0; i < kExpertSlots; ++i)
            if (!((taken >> i) & 1u) && v[i] > bv) bv = v[i], bi = i * warpSize + lane;
        for (int m = warpSize / 2; m > 0; m /= 2) {
            const float ov = STRATA_SHFL_XOR(bv, m);
            const int oi = STRATA_SHFL_XOR(bi, m);
            if (ov > bv || (ov == bv && oi >= 0 && (bi < 0 || oi < bi))) bv = ov, bi = oi;
        }
        // NaN logits (every probability NaN): some expert, never one outside the table,
        // with the NaN of its probability as its weight, not counted in the sum.
        float pick = bv;
        if (bi < 0) bi = static_cast<int>(s), bv = 0.0f, pick = NAN;
        if (bi % warpSize == lane) taken |= 1u << (bi / warpSize);
        if (on && lane == 0) ids[s] = bi, wt[s] = pick;  // the probability p[bi], divided below
        top += bv;
    }
    top = fmaxf(top, 6.103515625e-5f);  // llama.cpp's clamp of the renormalizer
    if (on && lane == 0)
        for (int64_t s = 0; s < k; ++s) wt[s] = wt[s] / top;
}

}  // namespace strata::gpu::topk
