// Qwen3-Next (MODEL_SPEC 4) and Qwen3.5/3.6 (qwen35, qwen35moe: docs/qwen35.md): every
// layer is pre-norm with two residual branches; the mixer is a Gated DeltaNet (recurrent
// layers) or gated full attention (every full_attention_interval-th layer), the FFN a
// sparse MoE with a gated shared expert (qwen3next, qwen35moe) or a SwiGLU FFN (qwen35).
// Optional MTP (nextn) blocks after the main stack predict one token further (4.11).
// qwen35 differs from qwen3next in its GDN gate projections and value-head order only.
#include <algorithm>
#include <limits>

#include "engine/core/error.h"
#include "engine/model/blocks.h"
#include "engine/model/gdn.h"
#include "engine/model/moe.h"
#include "engine/model/weights.h"

namespace strata {
namespace {

struct Q3nLayer : LayerWeights {
    WeightVec attn_norm;  // [n_embd] (the "+1" of the zero-centered norm is in the file)
    bool recurrent = false;
    AttnWeights attn;              // full-attention layers: gated, q/k norm (attn.norm unused: see attn_norm)
    GdnWeights gdn;                // recurrent layers
    WeightVec post_norm;  // [n_embd] post_attention_norm (not ffn_norm)
    MoeWeights moe;       // qwen3next, qwen35moe ...
    FfnWeights ffn;       // ... or a dense FFN (qwen35)
};

struct MtpBlock final : LayerWeights {
    MatView eh_proj;                      // [2 n_embd, n_embd] input [enorm(embedding) ; hnorm(hidden)]
    WeightVec enorm, hnorm;      // [n_embd]
    WeightVec head_norm;         // [n_embd] nextn.shared_head_norm, else output_norm
    MatView embd, head;                   // [n_embd, n_vocab] nextn.embed_tokens / shared_head_head, else shared
    Q3nLayer layer;                       // a full-attention decoder layer
};

class Qwen3NextModel final : public Model {
public:
    Qwen3NextModel(GgufFile f, std::unique_ptr<GgufFile> mtp) : Model(std::move(f), std::move(mtp)), gdn_dims_(gdn_dims(hp_)) {
        const GdnDims& d = gdn_dims_;
        STRATA_CHECK(d.dv * d.nv == hp_.ssm_d_inner, "{}: ssm.inner_size {} is not a multiple of time_step_rank {}",
                     file_.path(), hp_.ssm_d_inner, d.nv);
        WeightBinder b(file_, bound_);
        for (int64_t il = 0; il < hp_.n_layer; ++il) layers_.push_back(bind_layer(b, il, hp_.is_recurrent(il)));
        const WeightBinder mb = mtp_binder();
        for (int64_t i = 0; i < hp_.n_nextn; ++i) {
            const std::string p = "blk." + std::to_string(hp_.n_layer + i) + ".nextn.";
            const int64_t E = hp_.n_embd;
            MtpBlock m;
            m.eh_proj = mb.mat(p + "eh_proj.weight", 2 * E, E);
            m.enorm = mb.vec(p + "enorm.weight", E);
            m.hnorm = mb.vec(p + "hnorm.weight", E);
            m.head_norm = mb.has(p + "shared_head_norm.weight") ? mb.vec(p + "shared_head_norm.weight", E) : output_norm_;
            m.embd = mb.has(p + "embed_tokens.weight") ? mb.mat(p + "embed_tokens.weight", E, hp_.n_vocab) : tok_embd_;
            m.head = mb.has(p + "shared_head_head.weight") ? mb.mat(p + "shared_head_head.weight", E, hp_.n_vocab) : output_;
            m.layer = bind_layer(mb, hp_.n_layer + i, false);
            mtp_.push_back(std::move(m));
        }
    }

    bool has_mtp() const override { return !mtp_.empty(); }
    void mtp_forward(ForwardCtx& ctx, SeqState& s, const float* hidden, const int32_t* next_tokens, int64_t T,
                     int64_t pos0, float* logits_out, float* hidden_out, bool last_only,
                     int64_t draft_rows) const override;
    void replay_log(ForwardCtx& ctx, SeqState& s, int64_t n) const override {
        for (int64_t il = ctx.weights->l0; il < ctx.weights->l1; ++il)
            if (s.gdn_slot[static_cast<size_t>(il)] >= 0)
                gdn_replay(ctx, gdn_dims_, static_cast<const Q3nLayer&>(ctx.weights->layer(il)).gdn, s, il, n);
    }

protected:
    void layer(ForwardCtx& ctx, const Batch& batch, int64_t il, float* x) const override {
        decoder_layer(ctx, batch, static_cast<const Q3nLayer&>(ctx.weights->layer(il)), il, x);
    }
    std::unique_ptr<LayerWeights> place_layer(WeightPlacer& p, int64_t il) const override {
        auto L = std::make_unique<Q3nLayer>(layers_[static_cast<size_t>(il)]);
        prepare_layer(p, *L);
        return L;
    }
    std::unique_ptr<LayerWeights> place_mtp(WeightPlacer& p) const override;

private:
    Q3nLayer bind_layer(const WeightBinder& b, int64_t il, bool recurrent) const;
    // last >= 0: only the last `last` rows' outputs are wanted (the MTP block's catch-up:
    // the other rows only extend its KV cache); x's other rows are left as they were.
    void decoder_layer(ForwardCtx& ctx, const Batch& batch, const Q3nLayer& L, int64_t il, float* x,
                       int64_t last = -1) const;

    static void prepare_layer(WeightPlacer& ops, Q3nLayer& L);

    GdnDims gdn_dims_;
    std::vector<Q3nLayer> layers_;  // as bound from the file
    std::vector<MtpBlock> mtp_;
};

void Qwen3NextModel::prepare_layer(WeightPlacer& ops, Q3nLayer& L) {
    if (L.recurrent) prepare(ops, L.gdn);
    else prepare(ops, L.attn);
    if (L.moe.router.data) prepare(ops, L.moe);
    else prepare(ops, L.ffn);
    L.attn_norm.prepare(ops);
    L.post_norm.prepare(ops);
}

// The first MTP block (one block, reused for every chained step: 4.11.4).
std::unique_ptr<LayerWeights> Qwen3NextModel::place_mtp(WeightPlacer& p) const {
    if (mtp_.empty()) return nullptr;
    auto m = std::make_unique<MtpBlock>(mtp_.front());
    m->eh_proj = p.weight(m->eh_proj);
    m->head = p.weight(m->head);
    m->embd = p.table(m->embd);
    prepare_layer(p, m->layer);
    for (WeightVec* v : {&m->enorm, &m->hnorm, &m->head_norm}) v->prepare(p);
    return m;
}

Q3nLayer Qwen3NextModel::bind_layer(const WeightBinder& b, int64_t il, bool recurrent) const {
    const HParams& h = hp_;
    const GdnDims& d = gdn_dims_;
    const std::string p = "blk." + std::to_string(il) + ".";
    Q3nLayer L;
    L.recurrent = recurrent;
    L.attn_norm = b.vec(p + "attn_norm.weight", h.n_embd);
    if (recurrent) {
        GdnWeights& g = L.gdn;
        // Prefer the current split layout, as llama.cpp does; else the legacy fused one.
        g.fused = !d.tiled && !b.has(p + "attn_qkv.weight") && b.has(p + "ssm_in.weight");
        if (g.fused) {
            g.in = b.mat(p + "ssm_in.weight", h.n_embd, 2 * d.key_dim() + 2 * d.value_dim());
        } else {
            g.qkv = b.mat(p + "attn_qkv.weight", h.n_embd, d.conv_dim());
            g.gate = b.mat(p + "attn_gate.weight", h.n_embd, d.value_dim());
        }
        if (d.tiled) {  // qwen35: no ssm_ba, and no legacy layout (docs/qwen35.md 2.2)
            g.beta = b.mat(p + "ssm_beta.weight", h.n_embd, d.nv);
            g.alpha = b.mat(p + "ssm_alpha.weight", h.n_embd, d.nv);
        } else {
            g.ba = b.mat(p + "ssm_ba.weight", h.n_embd, 2 * d.nv);
        }
        g.conv = b.small(p + "ssm_conv1d.weight", d.conv_k, d.conv_dim());
        g.dt_bias = b.vec(p + "ssm_dt.bias", d.nv);
        g.a = b.vec(p + "ssm_a", d.nv);
        g.norm = b.vec(p + "ssm_norm.weight", d.dv);
        g.out = b.mat(p + "ssm_out.weight", d.value_dim(), h.n_embd);
    } else {
        AttnWeights& a = L.attn;
        a.gated = true;
        a.wq = b.mat(p + "attn_q.weight", h.n_embd, 2 * h.n_q());  // per head [query | gate]
        a.wk = b.mat(p + "attn_k.weight", h.n_embd, h.n_kv());
        a.wv = b.mat(p + "attn_v.weight", h.n_embd, h.n_head_kv * h.head_dim_v);
        a.wo = b.mat(p + "attn_output.weight", h.n_head * h.head_dim_v, h.n_embd);
        a.q_norm = b.vec(p + "attn_q_norm.weight", h.head_dim);
        a.k_norm = b.vec(p + "attn_k_norm.weight", h.head_dim);
    }
    L.post_norm = b.vec(p + "post_attention_norm.weight", h.n_embd);
    if (h.moe()) {
        L.moe = bind_moe(b, h, p, il);
    } else {
        L.ffn.gate = b.mat(p + "ffn_gate.weight", h.n_embd, h.n_ff);
        L.ffn.up = b.mat(p + "ffn_up.weight", h.n_embd, h.n_ff);
        L.ffn.down = b.mat(p + "ffn_down.weight", h.n_ff, h.n_embd);
    }
    return L;
}

void Qwen3NextModel::decoder_layer(ForwardCtx& ctx, const Batch& batch, const Q3nLayer& L, int64_t il,
                                   float* x, int64_t last) const {
    const int64_t n = hp_.n_embd, T = batch.n_rows, R = last < 0 ? T : std::min(last, T);
    STRATA_CHECK(R == T || !L.recurrent, "a recurrent layer runs every row");
    const Scratch::Frame frame(ctx.scratch);
    const Tensor h = ctx.scratch.rows(n, T), out = ctx.scratch.rows(n, T);  // normed input, block output
    ctx.ops.rms_norm(Tensor::f32(x, n, T), L.attn_norm.data(), hp_.rms_eps, h);
    if (L.recurrent) gdn_block(ctx, gdn_dims_, L.gdn, batch, il, h.f(), out.f(), GdnForm::Recurrent);
    else attention_block(ctx, hp_, L.attn, batch, il, h.f(), out.f(), R);
    if (R == 0) return;
    // From here on only the rows wanted.
    const Tensor xs = Tensor::f32(x + (T - R) * n, n, R), hr = h.rows(T - R, R), outr = out.rows(T - R, R);
    ctx.ops.add(xs, outr);
    ctx.ops.rms_norm(xs, L.post_norm.data(), hp_.rms_eps, hr);
    if (L.moe.router.data) moe_block(ctx, hp_, L.moe, hr.f(), R, outr.f());
    else ffn_block(ctx, L.ffn, hr.f(), R, n, outr.f());
    ctx.ops.add(xs, outr);
}

void Qwen3NextModel::mtp_forward(ForwardCtx& ctx, SeqState& s, const float* hidden, const int32_t* next_tokens,
                                 int64_t T, int64_t pos0, float* logits_out, float* hidden_out,
                                 bool last_only, int64_t draft_rows) const {
    if (mtp_.empty())
        Model::mtp_forward(ctx, s, hidden, next_tokens, T, pos0, logits_out, hidden_out, last_only, draft_rows);
    STRATA_CHECK(draft_rows >= 0 && draft_rows % 256 == 0, "mtp_forward: a draft vocabulary of {} rows (a multiple of 256)",
                 draft_rows);
    STRATA_CHECK(T > 0 && pos0 >= 0 && pos0 + T <= s.n_ctx, "MTP window [{}, {}) outside the context of {}", pos0,
                 pos0 + T, s.n_ctx);
    STRATA_CHECK(static_cast<int64_t>(s.kv_slot.size()) > hp_.n_layer, "this state has no MTP KV slot");
    STRATA_CHECK(ctx.weights && ctx.weights->head && ctx.weights->mtp, "mtp_forward: this stage did not bind the MTP block");
    const auto& m = static_cast<const MtpBlock&>(*ctx.weights->mtp);  // one block, reused for every chained step (4.11.4)
    const int64_t E = hp_.n_embd;
    // [T, 2 n_embd]: [enorm(embedding) ; hnorm(hidden)] (the embedding half first, 4.11.2)
    const Scratch::Frame frame(ctx.scratch);
    const Tensor eh = ctx.scratch.rows(2 * E, T);
    const Tensor e = Tensor::f32(eh.f(), E, T, 2 * E), hh = Tensor::f32(eh.f() + E, E, T, 2 * E);
    const Tensor x = ctx.scratch.rows(E, T);  // block stream
    ctx.ops.get_rows(m.embd, ctx.in_ids(next_tokens, T, m.embd.n_out), e);
    ctx.ops.rms_norm(e, m.enorm.data(), hp_.rms_eps, e);
    ctx.ops.rms_norm(Tensor::f32(ctx.in_rows(hidden, static_cast<size_t>(T * E)), E, T), m.hnorm.data(), hp_.rms_eps, hh);
    ctx.ops.matmul(m.eh_proj, eh, x);
    // Rows whose output is wanted: every row, or only the last pair's (none when nothing
    // is asked): the others only put their K and V into the block's cache, so a catch-up
    // over a window or a prompt runs the block's attention and MoE for one row.
    const int64_t n = !last_only ? T : logits_out || hidden_out ? 1 : 0;
    decoder_layer(ctx, Batch::single(s, pos0, T), m.layer, hp_.n_layer, x.f(), n);
    if (n == 0) return;
    const Tensor hn = ctx.scratch.rows(E, n);
    ctx.ops.rms_norm(x.rows(T - n, n), m.head_norm.data(), hp_.rms_eps, hn);
    if (hidden_out) ctx.out_done(hidden_out, hn.f(), static_cast<size_t>(n * E));
    if (!logits_out) return;
    // The head may rank only the first draft_rows tokens (a draft vocabulary): the rest
    // of each row is -inf, never drafted.
    const int64_t V = hp_.n_vocab;
    const int64_t D = draft_rows > 0 && draft_rows < m.head.n_out ? draft_rows : m.head.n_out;
    MatView head = m.head;
    head.n_out = D;
    const size_t nd = static_cast<size_t>(n * D);
    float* logits = ctx.out_rows(logits_out, nd);
    ctx.ops.matmul(head, hn, Tensor::f32(logits, D, n));
    ctx.out_done(logits_out, logits, nd);
    if (D < V)
        for (int64_t r = n - 1; r >= 0; --r) {  // rows of D spread to rows of V, last first (in place)
            std::copy_backward(logits_out + r * D, logits_out + (r + 1) * D, logits_out + r * V + D);
            std::fill(logits_out + r * V + D, logits_out + (r + 1) * V, -std::numeric_limits<float>::infinity());
        }
}

}  // namespace

std::unique_ptr<Model> make_qwen3next_model(GgufFile file, std::unique_ptr<GgufFile> mtp) {
    return std::make_unique<Qwen3NextModel>(std::move(file), std::move(mtp));
}

}  // namespace strata
