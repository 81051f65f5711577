#include "engine/model/blocks.h"

#include <algorithm>

namespace strata {


void prepare(WeightPlacer& ops, AttnWeights& w) {
    for (MatView* m : {&w.wq, &w.wk, &w.wv, &w.wo}) *m = ops.weight(*m);
    for (WeightVec* v : {&w.norm, &w.q_norm, &w.k_norm}) v->prepare(ops);
}

void prepare(WeightPlacer& ops, FfnWeights& w) {
    for (MatView* m : {&w.gate, &w.up, &w.down}) *m = ops.weight(*m);
}

void attention_block(ForwardCtx& ctx, const HParams& hp, const AttnWeights& w, const Batch& batch,
                     int64_t il, const float* h, float* out, int64_t last) {
    const int64_t T = batch.n_rows, R = last < 0 ? T : std::min(last, T);
    STRATA_CHECK(R == T || batch.seqs.size() == 1, "attention: the last rows alone of a batch of {} sequences",
                 batch.seqs.size());
    const int64_t n_embd = hp.n_embd, hd = hp.head_dim, hdv = hp.head_dim_v;
    const int64_t n_q = hp.n_head * hd, n_kv = hp.n_head_kv * hd, n_kv_v = hp.n_head_kv * hdv;
    const int64_t q_rows = w.gated ? 2 * n_q : n_q;
    const Scratch::Frame frame(ctx.scratch);
    const Tensor q = ctx.scratch.rows(q_rows, T), k = ctx.scratch.rows(n_kv, T), v = ctx.scratch.rows(n_kv_v, T);
    const Tensor attn = ctx.scratch.rows(hp.n_head * hdv, T);
    const MatOut qkv[3] = {{w.wq, q.f(), q_rows}, {w.wk, k.f(), n_kv}, {w.wv, v.f(), n_kv_v}};
    ctx.ops.matmul_multi(qkv, Tensor::f32(h, n_embd, T));  // h quantized once for all three

    // Per-head norms and the rotary embedding, then each row's K/V into its sequence's cache.
    const RopeParams rope{hp.n_rot, hp.rope_neox, hp.rope_freq_base, hp.rope_freq_scale,
                          ctx.weights->rope_freqs.empty() ? nullptr : ctx.weights->rope_freqs.data(),
                          hp.rope_ext_factor, hp.rope_corr_low, hp.rope_corr_high, hp.rope_mscale};
    const int64_t q_head_stride = w.gated ? 2 * hd : hd;  // gated rows per head: [query | gate]
    const RopeHeads heads[2] = {{q, hp.n_head, q_head_stride, w.q_norm.empty() ? nullptr : w.q_norm.data()},
                                {k, hp.n_head_kv, hd, w.k_norm.empty() ? nullptr : w.k_norm.data()}};
    ctx.ops.norm_rope(batch, heads, hd, hp.rms_eps, rope);
    ctx.ops.kv_store(batch, il, k, v);
    if (R == 0) return;
    const BatchSeq& s0 = batch.seqs.front();
    const Batch tail = R == T ? Batch() : Batch::single(*s0.state, s0.pos0 + T - R, R);
    ctx.ops.attention(R == T ? batch : tail, il, AttnDims{hp.n_head, hp.n_head_kv, hd, hdv}, q.rows(T - R, R),
                      q_head_stride, w.gated, attn.rows(0, R));
    ctx.ops.matmul(w.wo, attn.rows(0, R), Tensor::f32(out + (T - R) * n_embd, n_embd, R));
}

void ffn_block(ForwardCtx& ctx, const FfnWeights& w, const float* h, int64_t T, int64_t n_embd, float* out) {
    const int64_t n_ff = w.gate.n_out;
    const Scratch::Frame frame(ctx.scratch);
    const Tensor g = ctx.scratch.rows(n_ff, T), u = ctx.scratch.rows(n_ff, T);
    const MatOut gu[2] = {{w.gate, g.f(), n_ff}, {w.up, u.f(), n_ff}};
    ctx.ops.matmul_multi(gu, Tensor::f32(h, n_embd, T));
    ctx.ops.swiglu(g, u, g);
    ctx.ops.matmul(w.down, g, Tensor::f32(out, n_embd, T));
}

}  // namespace strata
