#include "engine/model/moe.h"

#include "engine/model/host_experts.h"
#include "engine/model/weights.h"

namespace strata {

MoeWeights bind_moe(const WeightBinder& b, const HParams& hp, const std::string& p, int64_t il) {
    MoeWeights w;
    w.il = il;
    const int64_t E = hp.n_embd, X = hp.n_expert, F = hp.n_ff_exp, S = hp.n_ff_shexp;
    w.router = b.mat(p + "ffn_gate_inp.weight", E, X);
    if (b.has(p + "ffn_gate_up_exps.weight")) {
        // Merged stack: rows [0, F) of each expert are gate, [F, 2F) up (MODEL_SPEC 5.2).
        for (const MatView& m : b.experts(p + "ffn_gate_up_exps.weight", E, 2 * F, X)) {
            MatView g = m, u = m;
            g.n_out = u.n_out = F;
            u.data = m.row(F);
            w.gate.push_back(g);
            w.up.push_back(u);
        }
    } else {
        w.gate = b.experts(p + "ffn_gate_exps.weight", E, F, X);
        w.up = b.experts(p + "ffn_up_exps.weight", E, F, X);
    }
    w.down = b.experts(p + "ffn_down_exps.weight", F, E, X);
    w.has_shared = S > 0;
    if (!w.has_shared) return w;
    w.shared_gate = b.vec(p + "ffn_gate_inp_shexp.weight", E);
    w.shared.gate = b.mat(p + "ffn_gate_shexp.weight", E, S);
    w.shared.up = b.mat(p + "ffn_up_shexp.weight", E, S);
    w.shared.down = b.mat(p + "ffn_down_shexp.weight", S, E);
    return w;
}

void prepare(WeightPlacer& ops, MoeWeights& w) {
    w.router = ops.weight(w.router);
    WeightPlacer* host = ops.host_experts(w.il);
    w.host = host != nullptr;
    if (w.host) {
        w.file_gate = w.gate;
        w.file_up = w.up;
        w.file_down = w.down;
    }
    for (auto* list : {&w.gate, &w.up, &w.down})
        for (MatView& m : *list) m = (host ? *host : ops).weight(m);
    if (!w.has_shared) return;
    prepare(ops, w.shared);
    w.shared_gate.prepare(ops);
}

void moe_block(ForwardCtx& ctx, const HParams& hp, const MoeWeights& w, const float* h, int64_t T, float* out) {
    const int64_t E = hp.n_embd, X = hp.n_expert, k = hp.n_expert_used;
    const Tensor hs = Tensor::f32(h, E, T);
    const Scratch::Frame frame(ctx.scratch);
    const Tensor probs = ctx.scratch.rows(X, T);  // [T, n_expert]
    ctx.ops.matmul(w.router, hs, probs);
    // Routing: per token the chosen experts and their weights.
    int32_t* sel = ctx.scratch.ints(static_cast<size_t>(T * k));
    float* wt = ctx.scratch.floats(static_cast<size_t>(T * k));
    ctx.ops.topk_softmax(probs, k, sel, wt);
    const Tensor routed = ctx.scratch.rows(E, T * k);  // [T, k, n_embd]
    Tensor shared;  // none: the combine sums the routed experts alone
    SharedExpert sh;
    if (w.has_shared) {
        shared = ctx.scratch.rows(E, T);
        sh = {w.shared.gate, w.shared.up, w.shared.down, shared};
    }
    // The shared expert goes with the routed ones where the backend takes it (fewer
    // parallel runs on a CPU, fewer launches on a GPU), else on its own, the same bits.
    bool shared_done = !w.has_shared;
    if (w.host) ctx.weights->host_experts->run(ctx, w, sel, k, hs, routed);
    else shared_done = ctx.ops.moe_experts(w.gate, w.up, w.down, sel, k, hs, routed, w.has_shared ? &sh : nullptr);
    if (!shared_done) ffn_block(ctx, w.shared, h, T, E, shared.f());
    ctx.ops.moe_combine(routed, wt, k, shared, w.has_shared ? w.shared_gate.data() : nullptr, hs,
                        Tensor::f32(out, E, T));
}

}  // namespace strata
