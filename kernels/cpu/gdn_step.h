// One token of the Gated DeltaNet recurrence for one head (MODEL_SPEC 8.1 item 8), over
// the head's state stored transposed (M[j][i] = S[i][j], dv rows of dk values), in one
// pass per row: row j only meets v[j], so
//   row *= e;  m = simd::dot(row, k);  delta = b * (v[j] - m);  row += k * delta;
//   out[j] = simd::dot(row, q)
// with the decay fused into the first dot product and the update into the second. The
// floats are those of the plain per-row loops (each element sees the same multiplies and
// adds, the dot products simd::dot's fixed order), on every instruction set.
#pragma once
#include <cstdint>

namespace strata::ops {

void gdn_step(float* M, int64_t dv, int64_t dk, const float* q, const float* k, const float* v, float e, float b,
              float* out);

}  // namespace strata::ops
