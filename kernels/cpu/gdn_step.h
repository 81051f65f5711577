// The Gated DeltaNet recurrence for one head (MODEL_SPEC 8.1 item 8), over the head's
// state stored transposed (M[j][i] = S[i][j], dv rows of dk values), in one pass per row
// and token: row j only meets v[j], so
//   row *= e;  m = simd::dot(row, k);  delta = b * (v[j] - m);  row += k * delta;
//   out[j] = simd::dot(row, q)
// with the decay fused into the first dot product and the update into the second. The
// floats are those of the plain per-row loops (each element sees the same multiplies and
// adds, the dot products simd::dot's fixed order), on every instruction set.
#pragma once
#include <cstdint>

namespace strata::ops {

// One token: the form the plain per-row loops check (tests/test_attention.cpp), and the
// reference gdn_steps is checked against; the model runs gdn_steps.
void gdn_step(float* M, int64_t dv, int64_t dk, const float* q, const float* k, const float* v, float e, float b,
              float* out);

// T tokens, the same floats as T calls of gdn_step, with rows outermost: a row of the
// state is taken up once (into registers where dk is 32, 64 or 128), runs through a run of
// tokens and is written back once, where gdn_step would stream the whole head's state
// through the caches once per token. The state comes from M_in (may be M) and goes to M,
// so a state held in another buffer (a lent snapshot) costs no copy of its own.
// Token t: q + t * ld, k + t * ld, v + t * ld, e[t], b[t], its dv results at out + t * ldo.
void gdn_steps(const float* M_in, float* M, int64_t dv, int64_t dk, int64_t T, const float* q, const float* k,
               const float* v, int64_t ld, const float* e, const float* b, float* out, int64_t ldo);

}  // namespace strata::ops
