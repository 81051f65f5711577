#include "engine/model/gdn.h"

#include <array>

#include "engine/core/error.h"

namespace strata {

GdnDims gdn_dims(const HParams& hp) {
    GdnDims d;
    d.nk = hp.ssm_n_group;
    d.nv = hp.ssm_dt_rank;
    d.dk = hp.ssm_d_state;
    d.dv = hp.ssm_d_inner / hp.ssm_dt_rank;
    d.conv_k = hp.ssm_conv_kernel;
    d.eps = hp.rms_eps;
    d.tiled = hp.arch == Arch::Qwen35 || hp.arch == Arch::Qwen35Moe;  // docs/qwen35.md 2.3
    return d;
}

namespace {

// Legacy ssm_in output [T, per group: q dk | k dk | v r*dv | z r*dv] -> the current
// layout's conv input [T, q heads | k heads | v heads] and z [T, value heads].
void deinterleave(Ops& ops, const GdnDims& d, Tensor mixed, Tensor qkv, Tensor z) {
    const int64_t r = d.nv / d.nk, grp = 2 * d.dk + 2 * r * d.dv, T = mixed.ne1;
    auto cols = [T](const Tensor& t, int64_t c0, int64_t n) {
        return Tensor{t.row(0) + c0, GgmlType::F32, n, T, t.nb1};
    };
    for (int64_t g = 0; g < d.nk; ++g) {
        const int64_t src = g * grp;
        ops.copy(cols(qkv, g * d.dk, d.dk), cols(mixed, src, d.dk));
        ops.copy(cols(qkv, d.key_dim() + g * d.dk, d.dk), cols(mixed, src + d.dk, d.dk));
        ops.copy(cols(qkv, 2 * d.key_dim() + g * r * d.dv, r * d.dv), cols(mixed, src + 2 * d.dk, r * d.dv));
        ops.copy(cols(z, g * r * d.dv, r * d.dv), cols(mixed, src + 2 * d.dk + r * d.dv, r * d.dv));
    }
}

// One sequence's rows of a GDN layer: the causal conv with SiLU over the conv history
// of state slot `slot` (qkv [n, conv_dim] -> u), the L2 norms of q (scaled) and k, and
// the delta rule over the slot's state (-> o [n, nv * dv]). What a window runs, and what
// a rollback runs again from the window's log: one body, so the two cannot drift apart.
void advance(Ops& ops, const GdnDims& d, const float* conv_w, GdnState& g, int64_t slot, Tensor qkv, Tensor gate,
             Tensor beta, Tensor u, Tensor o, GdnForm form) {
    ops.gdn_conv(d, qkv, conv_w, g.conv(slot), u);
    float* state = g.ssm(slot);
    if (form == GdnForm::Chunked) {
        gdn_state_home(ops, g, slot);
        ops.gdn_chunked(d, u, gate, beta, state, o, 64);
    } else if (const float* in = g.ssm_in(slot); in != state) {  // right after a lent snapshot
        ops.gdn_recurrent_from(d, u, gate, beta, in, state, o);
    } else {
        ops.gdn_recurrent(d, u, gate, beta, state, o);
    }
    g.wrote(slot);
}

}  // namespace

void gdn_state_home(Ops& ops, GdnState& g, int64_t l) {
    if (const float* in = g.ssm_in(l); in != g.ssm(l))
        ops.copy(Tensor::f32(g.ssm(l), g.ssm_row(), g.ssm_rows()), Tensor::f32(in, g.ssm_row(), g.ssm_rows()));
}

void prepare(WeightPlacer& ops, GdnWeights& w) {
    for (MatView* m : {&w.qkv, &w.gate, &w.in, &w.ba, &w.beta, &w.alpha, &w.out})
        if (m->data) *m = ops.weight(*m);  // one of the input layouts is bound
    for (WeightVec* v : {&w.conv, &w.dt_bias, &w.a, &w.norm}) v->prepare(ops);
}

void gdn_block(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, const Batch& batch, int64_t il,
               const float* h, float* out, GdnForm form) {
    Ops& ops = ctx.ops;
    const int64_t T = batch.n_rows;
    const int64_t n_embd = w.out.n_out, cd = d.conv_dim(), vd = d.value_dim(), nv = d.nv;
    const Scratch::Frame frame(ctx.scratch);
    auto rows = [&](int64_t n) { return ctx.scratch.rows(n, T); };
    const Tensor hs = Tensor::f32(h, n_embd, T);
    const Tensor qkv = rows(cd);  // [T, conv_dim] pre-conv
    const Tensor z = rows(vd);      // [T, value_dim] output gate
    // Gates: ssm_ba is interleaved per key group [b(r) | a(r)] in both qwen3next layouts;
    // qwen35's two projections fill the halves [b(nv) | a(nv)] (GdnDims::tiled).
    const Tensor ba = rows(2 * nv);
    const Tensor gl = rows(nv);    // [T, nv] log-decay, <= 0
    const Tensor bt = rows(nv);  // [T, nv]
    // Every projection of h in one call: h quantized once, and on a GPU one launch per
    // weight type where there would be three or four.
    std::array<MatOut, 4> proj;
    size_t n_proj = 0;
    const Tensor mixed = w.fused ? rows(w.in.n_out) : Tensor{};
    const auto add = [&](const MatView& m, float* y, int64_t ldy) { proj[n_proj++] = {m, y, ldy}; };
    if (w.fused) {
        add(w.in, mixed.f(), w.in.n_out);
    } else {
        add(w.qkv, qkv.f(), cd);
        add(w.gate, z.f(), vd);
    }
    if (w.beta.data) {
        add(w.beta, ba.f(), 2 * nv);
        add(w.alpha, ba.f() + nv, 2 * nv);
    } else {
        add(w.ba, ba.f(), 2 * nv);
    }
    ops.matmul_multi({proj.data(), n_proj}, hs);
    if (w.fused) deinterleave(ops, d, mixed, qkv, z);
    ops.gdn_gates(d, ba, w.a.data(), w.dt_bias.data(), bt, gl);

    // Per sequence: the causal conv with SiLU over its own history, L2 norms, and the
    // delta rule over its own state (advance); a verify window's inputs also go to the
    // sequence's log for its rollback (gdn_replay).
    const Tensor u = rows(cd);
    const Tensor o = rows(vd);  // [T, nv, dv]
    for (const BatchSeq& bs : batch.seqs) {
        const int64_t slot = bs.state->gdn_slot[static_cast<size_t>(il)];
        const Tensor qs = qkv.rows(bs.row0, bs.n), gs = gl.rows(bs.row0, bs.n), bs_beta = bt.rows(bs.row0, bs.n);
        if (GdnLog* log = bs.state->gdn_log.get(); log && log->take(slot, bs.n)) {
            ops.copy(Tensor::f32(log->qkv(slot), cd, bs.n), qs);
            ops.copy(Tensor::f32(log->gate(slot), nv, bs.n), gs);
            ops.copy(Tensor::f32(log->beta(slot), nv, bs.n), bs_beta);
        }
        advance(ops, d, w.conv.data(), *bs.state->gdn, slot, qs, gs, bs_beta, u.rows(bs.row0, bs.n),
                o.rows(bs.row0, bs.n), form);
    }

    // Gated RMSNorm per value head: rmsnorm(o_h) * ssm_norm * silu(z_h).
    ops.rms_norm_gated(o, z, w.norm.data(), d.dv, d.eps);
    ops.matmul(w.out, o, Tensor::f32(out, n_embd, T));
}

void gdn_replay(ForwardCtx& ctx, const GdnDims& d, const GdnWeights& w, SeqState& s, int64_t il, int64_t n) {
    const int64_t slot = s.gdn_slot[static_cast<size_t>(il)], cd = d.conv_dim(), nv = d.nv;
    const GdnLog& log = *s.gdn_log;
    const Scratch::Frame frame(ctx.scratch);
    // gdn_block's per-sequence steps on the kept inputs; the output rows are not needed.
    advance(ctx.ops, d, w.conv.data(), *s.gdn, slot, Tensor::f32(log.qkv(slot), cd, n), Tensor::f32(log.gate(slot), nv, n),
            Tensor::f32(log.beta(slot), nv, n), ctx.scratch.rows(cd, n), ctx.scratch.rows(d.value_dim(), n),
            GdnForm::Recurrent);
}

}  // namespace strata
