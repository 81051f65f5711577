// Elementwise and per-row CPU ops. Each works on one row (or one head) at a time so
// the result for a token never depends on the other tokens of its window.
#pragma once
#include <cstdint>

namespace strata::ops {

// simd::dot(a, b, n)'s floats, in the widest vectors this CPU runs (simd_forms.h): for
// code outside the kernels, which is compiled for the baseline x86-64 (SSE2).
float dot(const float* a, const float* b, int64_t n);

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] (w may be null: no weight). y may alias x.
void rmsnorm(const float* x, const float* w, float eps, int64_t n, float* y);

// Rotary embedding of one head of size head_dim in place; only the first n_rot dims
// rotate. neox: pairs (i, i + n_rot/2); otherwise adjacent pairs (2i, 2i+1).
// freq_scale = 1 / linear scaling factor; freq_factors (n_rot/2 values) may be null.
void rope(float* x, int64_t head_dim, int64_t n_rot, bool neox, int64_t pos, float freq_base,
          float freq_scale, const float* freq_factors);

// The same rotation split in two: rope_angles writes the n_rot / 2 pairs (cos, sin) of
// position pos once (cs: n_rot floats), rope_apply rotates a head with them. rope(x, ...)
// equals rope_angles then rope_apply, bit for bit; a token's heads share the angles.
// YaRN (rope.scaling.type yarn): pair i's angle mixes the interpolated (freq_scale *)
// and the extrapolated one by ramp(i) * ext_factor, ramp falling from 1 to 0 between
// the correction dims corr_low..corr_high; cos and sin are scaled by mscale. The default
// (ext_factor 0, mscale 1) is plain RoPE, the same bits as without it.
struct RopeYarn {
    float ext_factor = 0.0f, corr_low = 0.0f, corr_high = 0.0f, mscale = 1.0f;
};
void rope_angles(int64_t n_rot, int64_t pos, float freq_base, float freq_scale, const float* freq_factors, float* cs,
                 const RopeYarn& yarn = {});
void rope_apply(float* x, int64_t n_rot, bool neox, const float* cs);

void softmax(float* x, int64_t n);  // in place, max-subtracted
float sigmoid(float x);
float softplus(float x);

// y[i] = g[i] / (1 + e^-g[i]) * u[i], e^x from simd::exp (so not bit-equal to silu(g[i]) * u[i]);
// each element depends only on g[i] and u[i]. y may alias g or u.
void swiglu(const float* g, const float* u, int64_t n, float* y);
// o[i] = o[i] * (1 / (1 + e^-g[i])) (a sigmoid gate), e^x from simd::exp; each element
// depends only on o[i] and g[i].
void sigmoid_mul(float* o, const float* g, int64_t n);
// The causal conv of a GDN layer for one token, channels [c0, c1): y[c] = silu(s) with
// s = 0 + w[c K] X[c] + w[c K + 1] X[cd + c] + ... (taps in order; X: the K rows of the
// window ending at this token, each cd channels), silu(s) = s / (1 + e^-s) with simd::exp.
// Each channel's result depends on its own weights and inputs only (the tail goes through
// the same lanes), so any split of the channels gives the same bits.
void conv_silu(const float* X, int64_t cd, int64_t K, const float* w, int64_t c0, int64_t c1, float* y);
void add(float* y, const float* x, int64_t n);  // y += x

}  // namespace strata::ops
