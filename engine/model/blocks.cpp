#include "engine/model/blocks.h"

#include <cmath>

#include "engine/model/scratch_slots.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace strata {

// Scratch slots used by the blocks (the layer code uses slots from 16 up).
enum : int {
    kQ = slot::kAttnQ, kK = slot::kAttnK, kV = slot::kAttnV, kAttn = slot::kAttnOut,
    kGate = slot::kFfnGate, kUp = slot::kFfnUp,
};

// Row -> index of its sequence in the batch (a per-thread buffer reused across calls).
std::vector<int32_t>& row_seq_of(const Batch& batch) {
    thread_local std::vector<int32_t> rs;
    rs.resize(static_cast<size_t>(batch.n_rows));
    for (size_t i = 0; i < batch.seqs.size(); ++i)
        for (int64_t r = 0; r < batch.seqs[i].n; ++r) rs[static_cast<size_t>(batch.seqs[i].row0 + r)] = static_cast<int32_t>(i);
    return rs;
}

void attention_block(ForwardCtx& ctx, const HParams& hp, const AttnWeights& w, const Batch& batch,
                     int64_t il, const float* h, float* out) {
    const int64_t T = batch.n_rows;
    const int64_t n_embd = hp.n_embd, hd = hp.head_dim, hdv = hp.head_dim_v;
    const int64_t n_q = hp.n_head * hd, n_kv = hp.n_head_kv * hd, n_kv_v = hp.n_head_kv * hdv;
    const int64_t q_rows = w.gated ? 2 * n_q : n_q;
    float* q = ctx.scratch.get(kQ, static_cast<size_t>(T * q_rows));
    float* k = ctx.scratch.get(kK, static_cast<size_t>(T * n_kv));
    float* v = ctx.scratch.get(kV, static_cast<size_t>(T * n_kv_v));
    float* attn = ctx.scratch.get(kAttn, static_cast<size_t>(T * hp.n_head * hdv));
    matmul(ctx.pool, w.wq, h, n_embd, T, q, q_rows);
    matmul(ctx.pool, w.wk, h, n_embd, T, k, n_kv);
    matmul(ctx.pool, w.wv, h, n_embd, T, v, n_kv_v);

    // Per token: per-head norms, rotary embedding, then into its sequence's cache.
    const int64_t q_head_stride = w.gated ? 2 * hd : hd;  // gated rows per head: [query | gate]
    std::vector<int32_t>& row_seq = row_seq_of(batch);
    for (int64_t t = 0; t < T; ++t) {
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq[t])];
        const int64_t pos = bs.pos0 + (t - bs.row0);
        for (int64_t hh = 0; hh < hp.n_head; ++hh) {
            float* qh = q + t * q_rows + hh * q_head_stride;
            if (!w.q_norm.empty()) ops::rmsnorm(qh, w.q_norm.data(), hp.rms_eps, hd, qh);
            ops::rope(qh, hd, hp.n_rot, hp.rope_neox, pos, hp.rope_freq_base, hp.rope_freq_scale, nullptr);
        }
        for (int64_t hh = 0; hh < hp.n_head_kv; ++hh) {
            float* kh = k + t * n_kv + hh * hd;
            if (!w.k_norm.empty()) ops::rmsnorm(kh, w.k_norm.data(), hp.rms_eps, hd, kh);
            ops::rope(kh, hd, hp.n_rot, hp.rope_neox, pos, hp.rope_freq_base, hp.rope_freq_scale, nullptr);
        }
        bs.state->kv->store(bs.state->kv_slot[static_cast<size_t>(il)], pos, k + t * n_kv, v + t * n_kv_v);
    }

    // Causal attention, one task per (token, head): a token's result depends only on
    // its own query and the cache, never on the rest of the window.
    const int64_t group = hp.n_head / hp.n_head_kv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    int64_t n_pos_max = 0;
    for (const BatchSeq& bs : batch.seqs) n_pos_max = std::max(n_pos_max, bs.pos0 + bs.n);
    ctx.pool.run(T * hp.n_head, [&](int64_t task) {
        const int64_t t = task / hp.n_head, hh = task % hp.n_head, kvh = hh / group;
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq[t])];
        const KvCache& kv = *bs.state->kv;
        const int64_t kv_layer = bs.state->kv_slot[static_cast<size_t>(il)];
        const int64_t n_pos = bs.pos0 + (t - bs.row0) + 1;
        thread_local std::vector<float> scores, kbuf, vbuf, acc;
        scores.resize(static_cast<size_t>(n_pos_max));
        kbuf.resize(static_cast<size_t>(hd));
        vbuf.resize(static_cast<size_t>(hdv));
        acc.assign(static_cast<size_t>(hdv), 0.0f);
        const float* qh = q + t * q_rows + hh * q_head_stride;
        for (int64_t u = 0; u < n_pos; ++u) {
            kv.read_k(kv_layer, u, kvh, hd, kbuf.data());
            scores[u] = simd::dot(qh, kbuf.data(), hd) * scale;
        }
        ops::softmax(scores.data(), n_pos);
        for (int64_t u = 0; u < n_pos; ++u) {
            kv.read_v(kv_layer, u, kvh, hdv, vbuf.data());
            const float a = scores[u];
            for (int64_t i = 0; i < hdv; ++i) acc[i] += a * vbuf[i];
        }
        float* o = attn + t * hp.n_head * hdv + hh * hdv;
        if (w.gated) {
            const float* gate = qh + hd;
            for (int64_t i = 0; i < hdv; ++i) o[i] = acc[i] * ops::sigmoid(gate[i]);
        } else {
            for (int64_t i = 0; i < hdv; ++i) o[i] = acc[i];
        }
    });
    matmul(ctx.pool, w.wo, attn, hp.n_head * hdv, T, out, n_embd);
}

void ffn_block(ForwardCtx& ctx, const FfnWeights& w, const float* h, int64_t T, int64_t n_embd, float* out) {
    const int64_t n_ff = w.gate.n_out;
    float* g = ctx.scratch.get(kGate, static_cast<size_t>(T * n_ff));
    float* u = ctx.scratch.get(kUp, static_cast<size_t>(T * n_ff));
    matmul(ctx.pool, w.gate, h, n_embd, T, g, n_ff);
    matmul(ctx.pool, w.up, h, n_embd, T, u, n_ff);
    ops::swiglu(g, u, T * n_ff, g);
    matmul(ctx.pool, w.down, g, n_ff, T, out, n_embd);
}

}  // namespace strata
