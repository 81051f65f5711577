// The gated delta rule of Qwen3-Next's Gated DeltaNet layers (MODEL_SPEC 4.5, 4.6) over
// one sequence's prepared rows. u: [T, conv_dim] post-conv channels with q (L2-normed
// and scaled by 1/sqrt(dk)) at 0, k (L2-normed) at key_dim, v at 2 key_dim; g, beta:
// [T, nv]; state: [nv, dv, dk] (each head's S stored transposed); o: [T, value_dim].
// One pool task per value head.
#pragma once
#include <cstdint>

#include "engine/core/thread_pool.h"

namespace strata::ops {

struct GdnHeads {
    int64_t nk = 0, nv = 0;  // key heads (groups), value heads
    int64_t dk = 0, dv = 0;  // key / value head size
    bool tiled = false;      // value head h uses key head h % nk (qwen35), else h / (nv / nk) (qwen3next)
    int64_t key_head(int64_t h) const { return tiled ? h % nk : h / (nv / nk); }
    int64_t key_dim() const { return nk * dk; }
    int64_t value_dim() const { return nv * dv; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Token by token (gdn_step.h): each token's result depends only on the state and itself,
// so any split of a sequence into windows gives bit-identical results. state_in (not
// null): the state before the rows is there, not in `state` (which gets the state after
// them); each row of it is read from there as the recurrence takes it up (gdn_steps), so
// the other buffer costs no copy.
void gdn_recurrent(ThreadPool& pool, const GdnHeads& d, const float* u, const float* g, const float* beta, int64_t T,
                   float* state, float* o, const float* state_in = nullptr);
// The chunked WY form with chunks of `chunk` tokens; agrees with gdn_recurrent to f32
// rounding (not bit for bit).
void gdn_chunked(ThreadPool& pool, const GdnHeads& d, const float* u, const float* g, const float* beta, int64_t T,
                 float* state, float* o, int64_t chunk);

}  // namespace strata::ops
