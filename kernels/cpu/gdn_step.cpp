#include "kernels/cpu/gdn_step.h"

#include "kernels/cpu/simd.h"

// The clones must compute what the default one does: no a * b + c contracted into an FMA.
#pragma GCC optimize("fp-contract=off")

namespace strata::ops {

__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void gdn_step(float* M, int64_t dv, int64_t dk, const float* q, const float* k, const float* v, float e, float b,
              float* out) {
    using simd::vf;
    const int64_t nv = dk / simd::kLanes * simd::kLanes;
    const vf ev = simd::splat(e);
    for (int64_t j = 0; j < dv; ++j) {
        float* row = M + j * dk;
        // row *= e and m = dot(row, k), as simd::dot sums: lanes, then the tail in order
        vf acc = simd::zero();
        for (int64_t i = 0; i < nv; i += simd::kLanes) {
            const vf r = simd::load(row + i) * ev;
            simd::store(row + i, r);
            acc += r * simd::load(k + i);
        }
        float m = simd::hsum(acc);
        for (int64_t i = nv; i < dk; ++i) {
            row[i] *= e;
            m += row[i] * k[i];
        }
        const float delta = b * (v[j] - m);
        // row += k * delta and out[j] = dot(row, q)
        const vf dl = simd::splat(delta);
        acc = simd::zero();
        for (int64_t i = 0; i < nv; i += simd::kLanes) {
            const vf r = simd::load(row + i) + simd::load(k + i) * dl;
            simd::store(row + i, r);
            acc += r * simd::load(q + i);
        }
        float o = simd::hsum(acc);
        for (int64_t i = nv; i < dk; ++i) {
            row[i] += k[i] * delta;
            o += row[i] * q[i];
        }
        out[j] = o;
    }
}

}  // namespace strata::ops
