// Building blocks shared by the architectures, written once: attention over the KV
// cache (plain, or gated as Qwen3-Next has it) and the SwiGLU feed-forward.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/hparams.h"
#include "engine/model/model.h"

namespace strata {

struct AttnWeights {
    WeightVec norm;            // [n_embd] pre-attention RMSNorm
    MatView wq;                         // [n_embd, n_q] (gated: [n_embd, 2 n_q], per head [query | gate])
    MatView wk, wv;                     // [n_embd, n_kv]
    MatView wo;                         // [n_q, n_embd]
    WeightVec q_norm, k_norm;  // [head_dim] per-head RMSNorm (qwen3, qwen3next); empty = none
    bool gated = false;                 // output *= sigmoid(gate) per head (qwen3next)
};

struct FfnWeights {
    MatView gate, up;  // [n_embd, n_ff]
    MatView down;      // [n_ff, n_embd]
};

// The matrices made ready for a device (engine/backend/placer.h), in place.
void prepare(WeightPlacer& ops, AttnWeights& w);
void prepare(WeightPlacer& ops, FfnWeights& w);

// out[rows, n_embd] = attention(h) for the window's rows; h is already normed. Each
// sequence's K/V go to its own cache, in the slot its state gives model layer il.
// last >= 0 (a batch of one sequence): only the last `last` rows of out are wanted (the
// others are left as they were); every row's K and V still go into the cache, and those
// rows' results are the floats of the whole window (a row's attention reads only its
// query and the cache).
void attention_block(ForwardCtx& ctx, const HParams& hp, const AttnWeights& w, const Batch& batch,
                     int64_t il, const float* h, float* out, int64_t last = -1);

// out[T, n_embd] = down(silu(gate(h)) * up(h)).
void ffn_block(ForwardCtx& ctx, const FfnWeights& w, const float* h, int64_t T, int64_t n_embd, float* out);

}  // namespace strata
