// The arithmetic of a draw over the whole vocabulary (Sampler::probabilities without
// top-k): exponentials of the shifted logits and their sum, in SIMD float math that gives
// the same bits on every x86-64 CPU (SSE2 is the baseline; the scalar forms compute the
// same operations in the same order), instead of a double exp per token (~4 ms for a
// 150k vocabulary; this takes a few hundred microseconds).
#pragma once
#include <cstddef>
#include <span>

namespace strata {

// out[i] = exp((x[i] - mx) / t) for x[i] <= mx (t > 0): Cody-Waite reduction by ln 2 and a
// degree-6 polynomial (within 2 ulp of the exact value; exp(0) is exactly 1). Results
// below FLT_MIN, -inf and NaN inputs give 0.
void exp_shifted(std::span<const float> x, float mx, float t, float* out);

// out[i] = float(double(e[i]) * inv).
void scale_to(std::span<const float> e, double inv, float* out);
// e[i] = 0 where e[i] < floor (or NaN).
void zero_below(std::span<float> e, float floor);

// The sum (as sum_fixed) and the count of the v[i] >= at.
double sum_at_least(std::span<const float> v, float at, size_t* count);

// The sum of v in double, in a fixed order: four interleaved partial sums (i % 4), then
// (s0 + s1) + (s2 + s3).
double sum_fixed(std::span<const float> v);

}  // namespace strata
