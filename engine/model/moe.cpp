#include "engine/model/moe.h"

#include <algorithm>
#include <cstring>

#include "engine/model/scratch_slots.h"
#include "engine/model/weights.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace strata {

// Scratch slots (blocks.cpp 0-7, layers 14-17, gdn 20-28, MTP 40+). ffn_block (the
// shared expert) uses slots 4-5, which are free here.
enum : int {
    kRouter = slot::kMoeRouter, kXe = slot::kMoeXe, kGe = slot::kMoeGe, kUe = slot::kMoeUe, kYe = slot::kMoeYe,
    kRouted = slot::kMoeRouted, kShared = slot::kMoeShared,
};

MoeWeights bind_moe(const WeightBinder& b, const HParams& hp, const std::string& p) {
    MoeWeights w;
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
    w.shared_gate = b.vec(p + "ffn_gate_inp_shexp.weight", E);
    w.shared.gate = b.mat(p + "ffn_gate_shexp.weight", E, S);
    w.shared.up = b.mat(p + "ffn_up_shexp.weight", E, S);
    w.shared.down = b.mat(p + "ffn_down_shexp.weight", S, E);
    return w;
}

void top_k(const float* p, int64_t n, int64_t k, int32_t* idx) {
    // k is small (10 of 512): k passes of a strict '>' scan keep the lowest index on ties.
    for (int64_t s = 0; s < k; ++s) {
        int32_t best = -1;
        for (int64_t e = 0; e < n; ++e) {
            bool taken = false;
            for (int64_t q = 0; q < s; ++q) taken |= idx[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = static_cast<int32_t>(e);
        }
        idx[s] = best;
    }
}

void moe_block(ForwardCtx& ctx, const HParams& hp, const MoeWeights& w, const float* h, int64_t T, float* out) {
    const int64_t E = hp.n_embd, X = hp.n_expert, k = hp.n_expert_used, F = hp.n_ff_exp;
    float* probs = ctx.scratch.get(kRouter, static_cast<size_t>(T * X));  // [T, n_expert]
    matmul(ctx.pool, w.router, h, E, T, probs, X);

    // Routing: per token the chosen experts and weights; then, per expert, the list of
    // (token, slot) pairs routed to it so each expert runs one batched matmul.
    thread_local std::vector<int32_t> sel, order, start;
    thread_local std::vector<float> wt;
    sel.resize(static_cast<size_t>(T * k));
    wt.resize(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t) {
        float* p = probs + t * X;
        ops::softmax(p, X);
        top_k(p, X, k, sel.data() + t * k);
        float sum = 0.0f;
        for (int64_t s = 0; s < k; ++s) sum += p[sel[t * k + s]];
        sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp of the renormalizer
        for (int64_t s = 0; s < k; ++s) wt[t * k + s] = p[sel[t * k + s]] / sum;
    }
    start.assign(static_cast<size_t>(X + 1), 0);
    for (int64_t i = 0; i < T * k; ++i) ++start[sel[i] + 1];
    for (int64_t e = 0; e < X; ++e) start[e + 1] += start[e];
    order.resize(static_cast<size_t>(T * k));
    thread_local std::vector<int32_t> next;
    next.assign(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) order[next[sel[i]]++] = static_cast<int32_t>(i);  // i = t*k + slot

    // Routed experts: gather rows, SwiGLU, scatter into routed[t][slot].
    float* routed = ctx.scratch.get(kRouted, static_cast<size_t>(T * k * E));  // [T, k, n_embd]
    for (int64_t e = 0; e < X; ++e) {
        const int64_t n = start[e + 1] - start[e];
        if (n == 0) continue;
        float* xe = ctx.scratch.get(kXe, static_cast<size_t>(n * E));
        float* ge = ctx.scratch.get(kGe, static_cast<size_t>(n * F));
        float* ue = ctx.scratch.get(kUe, static_cast<size_t>(n * F));
        float* ye = ctx.scratch.get(kYe, static_cast<size_t>(n * E));
        for (int64_t i = 0; i < n; ++i)
            std::memcpy(xe + i * E, h + (order[start[e] + i] / k) * E, sizeof(float) * E);
        matmul(ctx.pool, w.gate[e], xe, E, n, ge, F);
        matmul(ctx.pool, w.up[e], xe, E, n, ue, F);
        ops::swiglu(ge, ue, n * F, ge);
        matmul(ctx.pool, w.down[e], ge, F, n, ye, E);
        for (int64_t i = 0; i < n; ++i)
            std::memcpy(routed + static_cast<int64_t>(order[start[e] + i]) * E, ye + i * E, sizeof(float) * E);
    }

    float* shared = ctx.scratch.get(kShared, static_cast<size_t>(T * E));
    ffn_block(ctx, w.shared, h, T, E, shared);
    for (int64_t t = 0; t < T; ++t) {
        const float sg = ops::sigmoid(simd::dot(w.shared_gate.data(), h + t * E, E));
        float* y = out + t * E;
        std::fill(y, y + E, 0.0f);
        for (int64_t s = 0; s < k; ++s) {
            const float ws = wt[t * k + s];
            const float* ys = routed + (t * k + s) * E;
            for (int64_t i = 0; i < E; ++i) y[i] += ws * ys[i];
        }
        for (int64_t i = 0; i < E; ++i) y[i] += sg * shared[t * E + i];
    }
}

}  // namespace strata
