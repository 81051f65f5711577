// Gated DeltaNet block of Qwen3-Next (MODEL_SPEC 4.4-4.6): projections, causal
// depthwise conv with rolling history, L2-normed q/k, the gated delta rule, gated
// RMSNorm and the output projection. Two forms of the delta rule are provided: the
// token-by-token recurrence (what the model runs, for every window size) and the
// chunked WY form (tested against it; see docs/qwen3next.md for why the model does not
// use it on the CPU).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/hparams.h"
#include "engine/model/model.h"

namespace strata {

struct GdnDims {
    int64_t nk = 0, nv = 0;  // key heads (groups), value heads; value head h uses key head h / (nv / nk)
    int64_t dk = 0, dv = 0;  // key / value head size
    int64_t conv_k = 0;      // conv kernel K
    float eps = 1e-6f;       // rms_eps: gated norm and (as llama.cpp does) the l2-norm floor

    int64_t key_dim() const { return nk * dk; }
    int64_t value_dim() const { return nv * dv; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q | k | v channels
    static GdnDims from(const HParams& hp);
};

struct GdnWeights {
    // Exactly one input layout is bound (MODEL_SPEC 4.4.2):
    bool fused = false;          // legacy ssm_in
    MatView qkv;                 // [n_embd, conv_dim]  attn_qkv: rows [q heads | k heads | v heads]
    MatView gate;                // [n_embd, value_dim] attn_gate: z rows, value heads in order
    MatView in;                  // [n_embd, 2 key_dim + 2 value_dim] ssm_in: per group [q | k | v(r heads) | z(r heads)]
    MatView ba;                  // [n_embd, 2 nv] ssm_ba: per group [b(r) | a(r)], both layouts
    std::vector<float> conv;     // [conv_dim, K] ssm_conv1d, the K taps of a channel contiguous
    std::vector<float> dt_bias;  // [nv] ssm_dt.bias
    std::vector<float> a;        // [nv] ssm_a = -exp(A_log)
    std::vector<float> norm;     // [dv] ssm_norm, shared by all heads (no +1)
    MatView out;                 // [value_dim, n_embd] ssm_out
};

// out[rows, n_embd] = GDN(h[rows, n_embd]) (h already attn_norm'ed) for the window's
// rows. Each sequence's conv state [K-1, conv_dim] and ssm state [nv, dv, dk] (GdnState
// layout, slot state->gdn_slot[il]) are read and advanced by its rows.
// Recurrent form: each token's result depends only on the state and itself, so any
// split of a sequence into windows gives bit-identical results.
enum class GdnForm { Recurrent, Chunked };
void gdn_block(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, const Batch& batch, int64_t il,
               const float* h, float* out, GdnForm form = GdnForm::Recurrent);

// The delta rule alone over prepared inputs. u: [T, conv_dim] post-conv channels with q
// (L2-normed and scaled by 1/sqrt(dk)) at 0, k (L2-normed) at key_dim, v at 2 key_dim;
// g, beta: [T, nv]; state: [nv, dv, dk]; o: [T, value_dim]. One pool task per value head.
void gdn_recurrent(ThreadPool& pool, const GdnDims& d, const float* u, const float* g, const float* beta,
                   int64_t T, float* state, float* o);
// Same result by the chunked form (MODEL_SPEC 4.6) with chunks of `chunk` tokens;
// agrees with gdn_recurrent to f32 rounding (not bit for bit).
void gdn_chunked(ThreadPool& pool, const GdnDims& d, const float* u, const float* g, const float* beta,
                 int64_t T, float* state, float* o, int64_t chunk = 64);

}  // namespace strata
