// GpuOps' ops of a layer's attention, Gated DeltaNet and MoE parts (the rest of the
// class: gpu_ops.cpp).
#include <algorithm>
#include <vector>

#include "engine/backend/gpu_ops.h"
#include "engine/backend/gpu_ops_detail.h"
#include "engine/core/error.h"
#include "engine/state/seq_state.h"

namespace strata {

using namespace gpu_ops_detail;

template <typename F>
void GpuOps::for_seq_tables(const Batch& batch, int64_t il, bool with_kv, F&& f) {
    for (size_t i0 = 0; i0 < batch.seqs.size(); i0 += gpu::kMaxSeqs) {
        gpu::SeqTable t;
        std::vector<int64_t> pos;
        int64_t max_pos = 0;
        for (size_t i = i0; i < std::min(batch.seqs.size(), i0 + gpu::kMaxSeqs); ++i) {
            const BatchSeq& bs = batch.seqs[i];
            gpu::SeqRows& r = t.s[t.n++];
            r.row0 = bs.row0;
            r.n = bs.n;
            pos.push_back(bs.pos0);
            max_pos = std::max(max_pos, bs.pos0 + bs.n);
            if (!with_kv) continue;
            const KvCache& kv = *bs.state->kv;
            const int64_t layer = bs.state->kv_slot[static_cast<size_t>(il)];
            // Layout [layer][head][position][row] (engine/state/kv_cache.h).
            r.k = const_cast<uint8_t*>(kv.k_head(layer, 0));
            r.v = const_cast<uint8_t*>(kv.v_head(layer, 0));
            r.k_pos = static_cast<int64_t>(kv.k_stride());
            r.v_pos = static_cast<int64_t>(kv.v_stride());
            r.k_head = r.k_pos * kv.n_ctx();
            r.v_head = r.v_pos * kv.n_ctx();
            STRATA_CHECK(bs.pos0 + bs.n <= kv.n_ctx(), "KV store out of range: position {} of {}", bs.pos0 + bs.n - 1,
                         kv.n_ctx());
        }
        // Every layer of a window has the same positions: one upload serves them all.
        if (pos_dev_ == nullptr || pos != pos_host_) {
            pos_dev_ = static_cast<const int64_t*>(param(pos.data(), pos.size() * sizeof(int64_t)));
            pos_host_ = std::move(pos);
        }
        t.pos0 = pos_dev_;
        f(t, max_pos);
    }
}

void GpuOps::norm_rope(const Batch& batch, std::span<const RopeHeads> sets, int64_t head_dim, float eps,
                       const RopeParams& rope) {
    bind();
    STRATA_CHECK(sets.size() <= gpu::kMaxRopeSets, "norm_rope: {} head sets (the GPU kernel takes up to {})",
                 sets.size(), gpu::kMaxRopeSets);
    gpu::RopeArgs a{};
    a.n_sets = static_cast<int>(sets.size());
    for (size_t i = 0; i < sets.size(); ++i)
        a.set[i] = {sets[i].x.f(), sets[i].x.ld(), sets[i].n, sets[i].stride, sets[i].norm};
    a.head_dim = head_dim;
    a.n_rot = rope.n_rot;
    a.neox = rope.neox;
    a.eps = eps;
    a.freq_base = rope.freq_base;
    a.freq_scale = rope.freq_scale;
    a.freq_factors = rope.freq_factors;
    a.ext_factor = rope.ext_factor;
    a.corr_low = rope.corr_low;
    a.corr_high = rope.corr_high;
    a.mscale = rope.mscale;
    if (batch.seqs.size() <= static_cast<size_t>(gpu::kMaxSeqs)) {
        for_seq_tables(batch, 0, false, [&](const gpu::SeqTable& t, int64_t) { held_ = PendingRope{t, a}; });
        return;  // see kv_store
    }
    for_seq_tables(batch, 0, false, [&](const gpu::SeqTable& t, int64_t) { gpu::norm_rope(t, a, stream_); });
}

void GpuOps::issue(const PendingRope& r) {
    gpu::norm_rope(r.t, r.a, stream_);
}

void GpuOps::kv_store(const Batch& batch, int64_t il, Tensor k, Tensor v) {
    std::optional<PendingRope> rope = take<PendingRope>();  // launched below, with the store or before it
    bind();
    const auto issue_rope = [&] {
        if (rope) gpu::norm_rope(rope->t, rope->a, stream_);
        rope.reset();
    };
    if (batch.seqs.empty()) return issue_rope();
    const KvCache& kv = *batch.seqs[0].state->kv;
    for_seq_tables(batch, il, true, [&](const gpu::SeqTable& t, int64_t) {
        // The held rotation's rows and positions are these, and one of its sets is k's heads
        // as the store reads them: one launch.
        int k_set = -1;
        if (rope && rope->t.n == t.n && rope->t.pos0 == t.pos0 && rope->a.head_dim == kv.head_dim_k()) {
            bool same = true;
            for (int i = 0; i < t.n; ++i) same = same && rope->t.s[i].row0 == t.s[i].row0 && rope->t.s[i].n == t.s[i].n;
            for (int i = 0; same && i < rope->a.n_sets; ++i) {
                const gpu::RopeSet& rs = rope->a.set[i];
                if (rs.x == k.f() && rs.ld == k.ld() && rs.n == kv.n_head_kv() && rs.stride == kv.head_dim_k()) k_set = i;
            }
        }
        if (k_set >= 0) {
            const gpu::KvStore ks{rows(v), kv.n_head_kv(), kv.head_dim_v(), k_set, kv.type()};
            gpu::norm_rope_kv_store(t, rope->a, ks, stream_);
            rope.reset();
            return;
        }
        issue_rope();
        gpu::kv_store(t, kv.type(), kv.n_head_kv(), kv.head_dim_k(), kv.head_dim_v(), rows(k), rows(v), stream_);
    });
    issue_rope();
}

void GpuOps::attention(const Batch& batch, int64_t il, const AttnDims& d, Tensor q, int64_t head_stride, bool gated,
                       Tensor out) {
    bind();
    if (batch.seqs.empty()) return;
    const GgmlType type = batch.seqs[0].state->kv->type();
    float* part = scratch(kAttnSlot, gpu::attention_scratch_floats(q.ne1, d.n_head, d.head_dim_v));
    // The output quantized for the output projection in the merging kernel (fused_).
    const gpu::Rows o = rows(out);
    const bool fuse = fuses(o) && d.head_dim_v % 32 == 0 && o.cols == d.n_head * d.head_dim_v;
    const gpu::ActQ digits = fuse ? gpu::act_q_layout(fused_scratch(o), o.cols, o.rows) : gpu::ActQ{};
    for_seq_tables(batch, il, true, [&](const gpu::SeqTable& t, int64_t max_pos) {
        gpu::attention(t, max_pos, type, d.n_head, d.n_head_kv, d.head_dim, d.head_dim_v, rows(q), head_stride, gated,
                       o, part, stream_, digits);
    });
    if (fuse) fused_ = Fused{o, digits};
}

void GpuOps::gdn_gates(const GdnDims& d, Tensor ba, const float* a, const float* dt_bias, Tensor beta, Tensor g) {
    bind();
    if (ba.ne1 > 0) held_ = PendingGates{rows(ba), rows(beta), rows(g), d.nk, d.nv, d.tiled, a, dt_bias};
}

void GpuOps::issue(const PendingGates& p) {
    gpu::gdn_gates(p.ba, p.nk, p.nv, p.tiled, p.a, p.dt_bias, p.beta, p.g, stream_);
}

void GpuOps::conv1d_silu(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) {
    STRATA_CHECK(x.ne0 == d.conv_dim() && u.ne0 == d.conv_dim(), "conv1d: {} / {} channels, expected {}", x.ne0, u.ne0,
                 d.conv_dim());
    bind();
    gpu::conv1d_silu(rows(x), w, d.conv_k, conv_state, rows(u), stream_);
}

void GpuOps::gdn_conv(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) {
    STRATA_CHECK(x.ne0 == d.conv_dim() && u.ne0 == d.conv_dim(), "conv1d: {} / {} channels, expected {}", x.ne0, u.ne0,
                 d.conv_dim());
    // Held gates stay held (for the recurrence after this step) unless this step touches
    // what they read or write.
    if (const PendingGates* g = held<PendingGates>()) {
        const gpu::Rows xr = rows(x), ur = rows(u);
        const size_t state_bytes = sizeof(float) * static_cast<size_t>((d.conv_k - 1) * d.conv_dim());
        for (const gpu::Rows& r : {g->ba, g->beta, g->g})
            if (overlaps(r, xr) || overlaps(r, ur) || overlaps(r, conv_state, state_bytes)) {
                flush_held();
                break;
            }
    }
    const std::optional<PendingGates> kept = take<PendingGates>();
    bind();
    if (kept) held_ = *kept;
    if (!gpu::gdn_conv(rows(x), w, d.conv_k, conv_state, rows(u), d.nk, d.dk, d.eps, d.q_scale(), stream_))
        Ops::gdn_conv(d, x, w, conv_state, u);
}

void GpuOps::gdn_recurrent(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o) {
    gpu::GdnGateArgs gates;
    if (const PendingGates* p = held<PendingGates>(); p && same_rows(p->g, rows(g)) && same_rows(p->beta, rows(beta)) &&
                                                       p->nk == d.nk && p->nv == d.nv && p->tiled == d.tiled) {
        gates = {p->ba, p->a, p->dt_bias};
        held_ = std::monostate{};  // issued here, in the recurrence's kernel
    }
    bind();
    const gpu::Rows ur = rows(u), gr = rows(g), br = rows(beta), orr = rows(o);
    const size_t state_bytes = sizeof(float) * static_cast<size_t>(d.nv * d.dv * d.dk);
    // Held for the gated norm of its output (the GDN layer's next op), which its kernel
    // then runs: where o is written only here (the norm rewrites it in place).
    if (fuses(orr) && d.dv % 32 == 0 && !overlaps(orr, ur) && !overlaps(orr, gr) && !overlaps(orr, br) &&
        !overlaps(orr, state, state_bytes) && !overlaps(orr, gates.ba)) {
        held_ = PendingRecurrent{d, ur, gr, br, state, orr, gates};
        return;
    }
    gpu::gdn_recurrent(d.nk, d.nv, d.dk, d.dv, d.tiled, ur, gr, br, state, orr, stream_, gates);
}

void GpuOps::issue(const PendingRecurrent& r) {
    gpu::gdn_recurrent(r.d.nk, r.d.nv, r.d.dk, r.d.dv, r.d.tiled, r.u, r.g, r.beta, r.state, r.o, stream_, r.gates);
}

void GpuOps::gdn_chunked(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o, int64_t chunk) {
    // The chunked form's contract is the recurrence to f32 rounding; on the GPU the
    // recurrence itself meets it (a block per value head, token by token) until a
    // tiled WY kernel is worth its code for long prompts.
    (void)chunk;
    gdn_recurrent(d, u, g, beta, state, o);
}

void GpuOps::topk_softmax(Tensor logits, int64_t k, int32_t* ids, float* wt) {
    const gpu::Rows lr = rows(logits);
    const auto n = static_cast<size_t>(logits.ne1 * k);
    std::optional<PendingRouter> r;
    if (const PendingRouter* p = held<PendingRouter>(); p && same_rows(p->y, lr) &&
                                                        !overlaps(p->x, ids, n * sizeof(int32_t)) &&
                                                        !overlaps(p->x, wt, n * sizeof(float)) &&
                                                        !overlaps(lr, ids, n * sizeof(int32_t)) &&
                                                        !overlaps(lr, wt, n * sizeof(float))) {
        r = take<PendingRouter>();  // the product that wrote the logits routes them in its last block
    }
    bind_keeping();
    overwrites(ids, n * sizeof(int32_t));
    overwrites(wt, n * sizeof(float));
    if (r) gpu::matmul_topk(r->w, r->x, r->y, k, ids, wt, route_counter_, stream_);
    else gpu::topk_softmax(lr, k, ids, wt, stream_);
}

const uint8_t* const* GpuOps::expert_table(std::span<const MatView> w, const MatView* extra) {
    // Keyed by every expert's address: placed weights (engine/model/placement.h) lie in
    // memory that later holds other layers (a streamed layer's slot), and a cache of hot
    // experts leaves the others null (computed on the host). extra (a shared expert) is
    // entry w.size().
    std::vector<const uint8_t*> ptrs;
    ptrs.reserve(w.size() + 1);
    for (const MatView& m : w) {
        STRATA_CHECK(same_shape(m, w[0]), "moe_experts: experts of one tensor differ in type or shape");
        ptrs.push_back(static_cast<const uint8_t*>(m.data));
    }
    if (extra) {
        STRATA_CHECK(same_shape(*extra, w[0]), "moe_experts: the shared expert differs from the routed ones");
        ptrs.push_back(static_cast<const uint8_t*>(extra->data));
    }
    const uint8_t* const*& t = tables_[ptrs];
    if (!t) {
        void* dst = keep(ptrs.size() * sizeof(void*));
        to_device(dst, ptrs.data(), ptrs.size() * sizeof(void*));
        t = static_cast<const uint8_t* const*>(dst);
    }
    return t;
}

bool GpuOps::moe_experts(std::span<const MatView> gate, std::span<const MatView> up, std::span<const MatView> down,
                         const int32_t* ids, int64_t k, Tensor h, Tensor routed, const SharedExpert* shared) {
    bind_keeping();
    overwrites(rows(routed));
    const int64_t T = h.ne1, n = T * k, F = gate[0].n_out;
    // A window of many rows (a prompt) takes the experts one at a time: the rows grouped
    // by expert once, on the device, for the three products (group_by_expert says when).
    std::optional<gpu::ExpertGroups> groups;
    const auto n_expert = static_cast<int64_t>(gate.size());
    if (group_by_expert(h.ne1, n, n_expert) && gpu::int_dot(gate[0].type)) {
        const size_t ints = gpu::expert_groups_ints(n_expert, n);
        auto* scr = reinterpret_cast<int32_t*>(scratch(kGroupSlot, ints));
        groups = gpu::group_ids(ids, n, n_expert, scr, stream_);
    }
    // The shared expert as one more row per token of the by-id launches (entry n_expert of
    // each table): three launches fewer per layer, and the same bits as its own products
    // (a row's sums never depend on the rows beside it). Where it differs from the routed
    // experts in type or shape, or the rows go by expert, the caller runs it.
    const bool fold = shared && !groups && gpu::int_dot(gate[0].type) && gpu::int_dot(up[0].type) &&
                      gpu::int_dot(down[0].type) && same_shape(shared->gate, gate[0]) &&
                      same_shape(shared->up, up[0]) && same_shape(shared->down, down[0]) &&
                      shared->out.ld() == routed.ld();
    if (fold) overwrites(rows(shared->out));
    const int64_t nn = n + (fold ? T : 0);
    float* g = scratch(0, static_cast<size_t>(nn * F));
    float* u = scratch(1, static_cast<size_t>(nn * F));
    const gpu::Rows gr{g, F, nn, F}, ur{u, F, nn, F};
    // gate, up, down: each with x (h, or the SwiGLU of gate and up) quantized once when its
    // type takes integer dot products.
    gpu::ActQ xq{};
    const float* xq_of = nullptr;  // the rows xq holds
    // w's product, and w2's into y2 in the same launch where given (integer weights of w's
    // type and shape); sh: the shared expert's weight of each.
    const auto product = [&](std::span<const MatView> w, const MatView* sh, int64_t div, gpu::Rows x, gpu::Rows y,
                             gpu::IdsExtra ex, std::span<const MatView> w2 = {}, const MatView* sh2 = nullptr,
                             float* y2 = nullptr) {
        const MatView& w0 = w[0];
        if (gpu::int_dot(w0.type)) {
            if (xq_of != x.p) xq = quantized(x, kActSlot), xq_of = x.p;
            const uint8_t* const* t2 = w2.empty() ? nullptr : expert_table(w2, sh2);
            if (groups)
                gpu::matmul_grouped_q(w0.type, expert_table(w), w0.n_in, w0.n_out, w0.row_stride, *groups, div, xq, y,
                                      tab_, stream_, t2, y2);
            else
                gpu::matmul_ids_q(w0.type, expert_table(w, sh), w0.n_in, w0.n_out, w0.row_stride, ids, div, xq, y,
                                  tab_, stream_, t2, y2, ex);
        } else
            gpu::matmul_ids(w0.type, expert_table(w), w0.n_in, w0.n_out, w0.row_stride, ids, div, x, y, tab_, stream_);
    };
    // The shared expert's rows of gate and up follow the routed ones' (x: h's row j); its
    // down reads those rows of the SwiGLU and writes its out.
    gpu::IdsExtra gu_ex, up_ex, down_ex;  // gate and up in one launch, up alone, down
    if (fold) {
        gu_ex = {n, n_expert, 0, g + n * F, u + n * F};
        up_ex = {n, n_expert, 0, u + n * F, nullptr};
        down_ex = {n, n_expert, n, rows(shared->out).p, nullptr};
    }
    const MatView* sg = fold ? &shared->gate : nullptr;
    const MatView* su = fold ? &shared->up : nullptr;
    const MatView* sd = fold ? &shared->down : nullptr;
    const MatView &g0 = gate[0], &u0 = up[0];
    const size_t act_floats = (gpu::act_q_bytes(F, nn) + sizeof(float) - 1) / sizeof(float);
    const bool one_launch = gpu::int_dot(g0.type) && same_shape(u0, g0);  // gate and up
    if (one_launch && !groups && gpu::int_dot(down[0].type) && F % 32 == 0) {
        // ... and the SwiGLU, quantized for down, by the launch's last blocks (one launch fewer)
        const gpu::ActQ hq = quantized(rows(h), kActSlot);
        xq = gpu::matmul_ids_swiglu_q(g0.type, expert_table(gate, sg), expert_table(up, su), g0.n_in, F, g0.row_stride,
                                      ids, k, hq, gr, ur.p, gu_ex, scratch(kSwigluSlot, act_floats),
                                      counters(static_cast<size_t>(nn * F / 32)), tab_, stream_);
        xq_of = gr.p;
    } else {
        if (one_launch) {
            product(gate, sg, k, rows(h), gr, gu_ex, up, su, ur.p);
        } else {
            product(gate, sg, k, rows(h), gr, gu_ex);
            product(up, su, k, rows(h), ur, up_ex);
        }
        if (gpu::int_dot(down[0].type)) {  // the SwiGLU quantized for down as it is written
            xq = gpu::swiglu_q(gr, ur, gr, scratch(kActSlot, act_floats), stream_);
            xq_of = gr.p;
        } else
            gpu::swiglu(gr, ur, gr, stream_);
    }
    gpu::Rows out = rows(routed);
    out.rows = nn;  // the shared rows go to down_ex's out
    // Held for the combine of its rows (see moe_combine): integer weights, every expert on
    // this device (a row computed elsewhere comes in after the launch), a decode or verify
    // window's rows, the shared expert folded in or none.
    const MatView& d0 = down[0];
    const bool all_here =
        std::all_of(down.begin(), down.end(), [](const MatView& m) { return m.data != nullptr; });
    if (gpu::int_dot(d0.type) && !groups && all_here && xq_of == gr.p && fuses(rows(h)) && d0.n_out % 32 == 0 &&
        (fold || !shared)) {
        held_ = PendingDown{d0.type, expert_table(down, sd), d0.n_in, d0.n_out, d0.row_stride, ids, xq, out, down_ex};
        return fold || !shared;
    }
    product(down, sd, 1, gr, out, down_ex);
    return fold || !shared;
}

void GpuOps::issue(const PendingDown& d) {
    gpu::matmul_ids_q(d.type, d.table, d.n_in, d.n_out, d.stride, d.ids, 1, d.x, d.out, tab_, stream_, nullptr, nullptr,
                      d.ex);
}

void GpuOps::moe_combine(Tensor routed, const float* wt, int64_t k, Tensor shared, const float* shared_gate, Tensor h,
                         Tensor out) {
    const gpu::MoeCombine c{rows(routed), wt, k, shared.data ? rows(shared) : gpu::Rows{}, shared_gate, rows(h)};
    const gpu::Rows o = rows(out);
    // Held for the residual add and the norm after it (a layer's end, the next layer's
    // start): their kernel computes it, one launch for three.
    const bool hold = fuses(o) && c.h.rows == o.rows && clear_of(c, gpu::Rows{}, o, false);
    // The held down product of these rows (its routed rows c.routed, its shared rows
    // c.shared's, or none) goes along.
    std::optional<PendingDown> down;
    if (const PendingDown* d = held<PendingDown>();
        hold && d && d->out.p == c.routed.p && d->out.ld == c.routed.ld && c.routed.rows == c.h.rows * k &&
        d->ex.n_ids == (c.shared.p ? c.routed.rows : -1) && d->out.rows == c.routed.rows + (c.shared.p ? c.h.rows : 0) &&
        (!c.shared.p || (c.shared.p == d->ex.y && c.shared.ld == c.routed.ld)) &&
        !overlaps(o, d->out)) {
        down = take<PendingDown>();
    }
    bind();
    if (hold) held_ = PendingCombine{c, o, down};  // down: taken only where held
    else gpu::moe_combine(c, o, stream_);
}

static_assert(Handoff::kAbort == gpu::kHandoffAbort && Handoff::kTimeout == 1 && Handoff::kAborted == 2,
              "handoff.cu writes these values");

}  // namespace strata
