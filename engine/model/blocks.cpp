#include "engine/model/blocks.h"

#include <cmath>

#include "engine/model/scratch_slots.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"

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
    const MatOut qkv[3] = {{w.wq, q, q_rows}, {w.wk, k, n_kv}, {w.wv, v, n_kv_v}};
    matmul_multi(ctx.pool, qkv, h, n_embd, T);  // h quantized once for all three

    // Per token: per-head norms, rotary embedding (the angles once per token, shared by its
    // heads: the same floats as ops::rope per head), then into its sequence's cache.
    const int64_t q_head_stride = w.gated ? 2 * hd : hd;  // gated rows per head: [query | gate]
    std::vector<int32_t>& row_seq = row_seq_of(batch);
    thread_local std::vector<float> cs;
    cs.resize(static_cast<size_t>(hp.n_rot));
    for (int64_t t = 0; t < T; ++t) {
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq[t])];
        const int64_t pos = bs.pos0 + (t - bs.row0);
        ops::rope_angles(hp.n_rot, pos, hp.rope_freq_base, hp.rope_freq_scale, nullptr, cs.data());
        for (int64_t hh = 0; hh < hp.n_head; ++hh) {
            float* qh = q + t * q_rows + hh * q_head_stride;
            if (!w.q_norm.empty()) ops::rmsnorm(qh, w.q_norm.data(), hp.rms_eps, hd, qh);
            ops::rope_apply(qh, hp.n_rot, hp.rope_neox, cs.data());
        }
        for (int64_t hh = 0; hh < hp.n_head_kv; ++hh) {
            float* kh = k + t * n_kv + hh * hd;
            if (!w.k_norm.empty()) ops::rmsnorm(kh, w.k_norm.data(), hp.rms_eps, hd, kh);
            ops::rope_apply(kh, hp.n_rot, hp.rope_neox, cs.data());
        }
        bs.state->kv->store(bs.state->kv_slot[static_cast<size_t>(il)], pos, k + t * n_kv, v + t * n_kv_v);
    }

    // Causal attention. Each query head's result is the same fixed sequence as ever (scores
    // in position order, softmax, weighted sum of V in position order) and depends only on
    // its token's query and the cache, never on the rest of the window. A task takes a run
    // of up to kRun consecutive tokens of one sequence and `span` query heads of one KV
    // head's group, so each cached K/V row is read and converted once for all of them
    // (ops::attend_tokens); the group is split only as far as needed to give every thread
    // work (a decode step has one token).
    constexpr int64_t kRun = 4;
    thread_local std::vector<int64_t> runs_buf;
    std::vector<int64_t>& runs = runs_buf;  // first token of each run, then T (the workers see this thread's)
    runs.clear();
    for (int64_t t = 0; t < T; ++t)
        if (runs.empty() || t - runs.back() == kRun || row_seq[t] != row_seq[runs.back()]) runs.push_back(t);
    const int64_t n_runs = static_cast<int64_t>(runs.size());
    runs.push_back(T);
    const int64_t group = hp.n_head / hp.n_head_kv;
    int64_t span = group;
    while (span % 2 == 0 && n_runs * hp.n_head_kv * (group / span) < 2 * ctx.pool.size()) span /= 2;
    const int64_t n_split = group / span;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ctx.pool.run(n_runs * hp.n_head_kv * n_split, [&](int64_t task) {
        const int64_t ri = task / (hp.n_head_kv * n_split), kvh = task / n_split % hp.n_head_kv;
        const int64_t t0 = runs[static_cast<size_t>(ri)], n_tok = runs[static_cast<size_t>(ri) + 1] - t0;
        const int64_t h0 = kvh * group + task % n_split * span;  // first query head of the task
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq[t0])];
        const KvCache& kv = *bs.state->kv;
        const int64_t kv_layer = bs.state->kv_slot[static_cast<size_t>(il)];
        const int64_t n_pos0 = bs.pos0 + (t0 - bs.row0) + 1;
        const ops::KvRows k_rows{kv.type(), kv.k_head(kv_layer, kvh), kv.k_stride()};
        const ops::KvRows v_rows{kv.type(), kv.v_head(kv_layer, kvh), kv.v_stride()};
        const float* q0 = q + t0 * q_rows + h0 * q_head_stride;
        float* o0 = attn + t0 * hp.n_head * hdv + h0 * hdv;
        ops::attend_tokens(q0, q_rows, q_head_stride, n_tok, span, hd, hdv, scale, k_rows, v_rows, n_pos0, o0,
                           hp.n_head * hdv, hdv);
        if (w.gated)
            for (int64_t tk = 0; tk < n_tok; ++tk)
                for (int64_t j = 0; j < span; ++j) {
                    const float* gate = q0 + tk * q_rows + j * q_head_stride + hd;
                    float* o = o0 + tk * hp.n_head * hdv + j * hdv;
                    for (int64_t i = 0; i < hdv; ++i) o[i] = o[i] * ops::sigmoid(gate[i]);
                }
    });
    matmul(ctx.pool, w.wo, attn, hp.n_head * hdv, T, out, n_embd);
}

void ffn_block(ForwardCtx& ctx, const FfnWeights& w, const float* h, int64_t T, int64_t n_embd, float* out) {
    const int64_t n_ff = w.gate.n_out;
    float* g = ctx.scratch.get(kGate, static_cast<size_t>(T * n_ff));
    float* u = ctx.scratch.get(kUp, static_cast<size_t>(T * n_ff));
    const MatOut gu[2] = {{w.gate, g, n_ff}, {w.up, u, n_ff}};
    matmul_multi(ctx.pool, gu, h, n_embd, T);
    // Elementwise, so the split across threads changes nothing in the result: one equal
    // part per thread (a decode step has a few thousand values).
    const int64_t n = T * n_ff, parts = ctx.pool.size();
    ctx.pool.run(parts, [&](int64_t k) {
        const int64_t i0 = n * k / parts, i1 = n * (k + 1) / parts;
        ops::swiglu(g + i0, u + i0, i1 - i0, g + i0);
    });
    matmul(ctx.pool, w.down, g, n_ff, T, out, n_embd);
}

}  // namespace strata
