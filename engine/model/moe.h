// Sparse mixture of experts (Qwen3-Next MODEL_SPEC 4.8, Qwen3-MoE): softmax router over
// all experts in f32, top-k (ties -> lower index), top-k weights renormalized, SwiGLU
// experts, plus (Qwen3-Next) sigmoid(w_shgate . h) * a shared SwiGLU expert.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/blocks.h"
#include "engine/model/hparams.h"
#include "engine/model/model.h"

namespace strata {

struct MoeWeights {
    MatView router;                    // [n_embd, n_expert] ffn_gate_inp (f32 in converted files)
    std::vector<MatView> gate, up;     // n_expert x [n_embd, n_ff_exp] (split stacks, or halves of ffn_gate_up_exps)
    std::vector<MatView> down;         // n_expert x [n_ff_exp, n_embd]
    bool has_shared = false;           // hp.n_ff_shexp > 0
    WeightVec shared_gate;             // [n_embd] ffn_gate_inp_shexp
    FfnWeights shared;                 // [n_embd, n_ff_shexp] gate/up, [n_ff_shexp, n_embd] down
    int64_t il = -1;                   // the model layer
    // Experts in host memory (--cpu-moe): gate/up/down are the host's views, the file's
    // are kept for the device's cache of hot experts (HostExperts).
    bool host = false;
    std::vector<MatView> file_gate, file_up, file_down;
};

class WeightBinder;
// Binds blk.N.ffn_* of one layer (the shared expert when hp.n_ff_shexp > 0) (prefix "blk.N."); accepts ffn_gate_up_exps in place of
// ffn_gate_exps + ffn_up_exps.
MoeWeights bind_moe(const WeightBinder& b, const HParams& hp, const std::string& prefix, int64_t il);

void prepare(WeightPlacer& ops, MoeWeights& w);  // the matrices, for a device (engine/backend/placer.h)

// out[T, n_embd] = MoE(h[T, n_embd]). Each token's result is a fixed sequence of
// per-row operations (experts summed in top-k order, then the shared expert), so it
// does not depend on which other tokens share the window.
void moe_block(ForwardCtx& ctx, const HParams& hp, const MoeWeights& w, const float* h, int64_t T, float* out);

}  // namespace strata
