// Gated DeltaNet block of Qwen3-Next and Qwen3.5 (MODEL_SPEC 4.4-4.6, docs/qwen35.md 2.4): projections, causal
// depthwise conv with rolling history, L2-normed q/k, the gated delta rule, gated
// RMSNorm and the output projection. The delta rule has two forms (Ops::gdn_recurrent,
// Ops::gdn_chunked): the token-by-token recurrence is what the model runs, for every
// window size; the chunked WY form is tested against it (see docs/qwen3next.md for why
// the model does not use it on the CPU).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/hparams.h"
#include "engine/model/model.h"

namespace strata {

GdnDims gdn_dims(const HParams& hp);  // GdnDims: engine/backend/ops.h

struct GdnWeights {
    // Exactly one input layout is bound (MODEL_SPEC 4.4.2):
    bool fused = false;          // legacy ssm_in
    MatView qkv;                 // [n_embd, conv_dim]  attn_qkv: rows [q heads | k heads | v heads]
    MatView gate;                // [n_embd, value_dim] attn_gate: z rows, value heads in order
    MatView in;                  // [n_embd, 2 key_dim + 2 value_dim] ssm_in: per group [q | k | v(r heads) | z(r heads)]
    MatView ba;                  // [n_embd, 2 nv] ssm_ba: per group [b(r) | a(r)], both layouts (qwen3next)
    MatView beta, alpha;         // [n_embd, nv] ssm_beta, ssm_alpha: in place of ssm_ba (qwen35, tiled heads)
    WeightVec conv;     // [conv_dim, K] ssm_conv1d, the K taps of a channel contiguous
    WeightVec dt_bias;  // [nv] ssm_dt.bias
    WeightVec a;        // [nv] ssm_a = -exp(A_log)
    WeightVec norm;     // [dv] ssm_norm, shared by all heads (no +1)
    MatView out;                 // [value_dim, n_embd] ssm_out
};

// out[rows, n_embd] = GDN(h[rows, n_embd]) (h already attn_norm'ed) for the window's
// rows. Each sequence's conv state [K-1, conv_dim] and ssm state [nv, dv, dk] (GdnState
// layout, slot state->gdn_slot[il]) are read and advanced by its rows.
// Recurrent form: each token's result depends only on the state and itself, so any
// split of a sequence into windows gives bit-identical results.
enum class GdnForm { Recurrent, Chunked };
void prepare(WeightPlacer& ops, GdnWeights& w);  // the bound matrices, for a device (engine/backend/placer.h)
void gdn_block(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, const Batch& batch, int64_t il,
               const float* h, float* out, GdnForm form = GdnForm::Recurrent);
// Layer il of sequence s advanced by the first n rows of its GdnLog (state restored to
// the log's window start): bit for bit the state gdn_block leaves after those n rows.
void gdn_replay(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, SeqState& s, int64_t il, int64_t n);
// Layer l's delta-rule state copied into the state's own buffer from a lent snapshot's
// (GdnState::read_from), where it is still read from there; nothing otherwise.
void gdn_state_home(Ops& ops, GdnState& g, int64_t l);

}  // namespace strata
