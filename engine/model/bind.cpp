// Model::bind: a stage's weights placed for its device (each weight where the backend
// keeps it, or under a budget in blocks of device memory with the layers past the
// resident ones streamed, docs/streaming.md), the sizes the placement planner needs, and
// the measuring pass over a window's buffers.
#include <algorithm>
#include <functional>


#include "engine/backend/measure_ops.h"
#include "engine/core/error.h"
#include "engine/model/host_experts.h"
#include "engine/model/model.h"
#include "engine/model/streaming.h"

namespace strata {

StageWeights::StageWeights() = default;
StageWeights::~StageWeights() = default;

const LayerWeights& StageWeights::layer(int64_t il) const {
    STRATA_CHECK(il >= l0 && il < l1, "layer {} is not bound on this stage ({}..{})", il, l0, l1 - 1);
    const auto& r = resident[static_cast<size_t>(il - l0)];
    return r ? *r : stream->layer(il);
}

void Model::place_fixed(WeightPlacer& p, StageWeights& w) const {
    if (w.embed) w.tok_embd = p.table(tok_embd_);
    if (!rope_freqs_.empty()) {
        w.rope_freqs = rope_freqs_;
        w.rope_freqs.prepare(p);
    }
    if (w.head) {
        w.output = p.weight(output_);
        w.output_norm = output_norm_;
        w.output_norm.prepare(p);
        w.mtp = place_mtp(p);
    }
}

namespace {

// One block of device memory holding what walk(placer) places: counted first, then
// written in place (a device whose memory is host memory) or through a staging copy.
template <typename Walk>
Buffer place_block(Ops& ops, const std::function<WeightPlacer*(int64_t)>& host, Walk&& walk) {
    size_t n = 0;
    {
        BlockPlacer count(ops, nullptr, nullptr), elsewhere(ops, nullptr, nullptr);
        if (host) count.set_host_experts([&](int64_t il) { return host(il) ? &elsewhere : nullptr; });
        walk(count, /*keep=*/false);
        n = count.bytes();
    }
    Buffer block = ops.alloc(std::max<size_t>(n, 1));
    if (ops.host_memory()) {
        BlockPlacer p(ops, block.data(), block.data());
        p.set_host_experts(host);
        walk(p, true);
    } else {
        Buffer staging = ops.alloc_staging(std::max<size_t>(n, 1));
        BlockPlacer p(ops, block.data(), staging.data());
        p.set_host_experts(host);
        walk(p, true);
        ops.to_device(block.data(), staging.data(), n);
    }
    return block;
}

}  // namespace

size_t Model::layer_bytes(Ops& ops, int64_t il, bool experts_on_host) const {
    BlockPlacer count(ops, nullptr, nullptr), elsewhere(ops, nullptr, nullptr);
    if (experts_on_host) count.set_host_experts([&elsewhere](int64_t) { return &elsewhere; });
    place_layer(count, il);
    return count.bytes();
}

size_t Model::fixed_bytes(Ops& ops, bool embed, bool head) const {
    BlockPlacer count(ops, nullptr, nullptr);
    StageWeights w;
    w.embed = embed;
    w.head = head;
    place_fixed(count, w);
    return count.bytes();
}

size_t Model::window_bytes(int64_t l0, int64_t l1, bool embed, bool head, int64_t rows) const {
    MeasureOps ops;
    const std::unique_ptr<StageWeights> w = bind(ops, l0, l1, embed, head);
    SeqState st = new_state(ops, rows, GgmlType::F16, l0, l1, head);
    ForwardCtx ctx(ops, w.get());
    const Batch batch = Batch::single(st, 0, rows);
    const std::vector<int32_t> ids(static_cast<size_t>(rows), 0);
    std::vector<float> hidden(head ? static_cast<size_t>(rows * hp_.n_embd) : 0), logits(head ? hp_.n_vocab : 0);
    {
        const Scratch::Frame frame(ctx.scratch);
        float* x = ctx.scratch.floats(static_cast<size_t>(rows * hp_.n_embd));
        if (embed) this->embed(ctx, ids.data(), rows, x);
        run_layers(ctx, batch, l0, l1 < 0 ? hp_.n_layer : l1, x);
        if (head) {
            const OutputWant want{false, hidden.data()};
            output(ctx, batch, x, std::span<const OutputWant>(&want, 1), logits.data());
        }
    }
    if (head && has_mtp()) mtp_forward(ctx, st, hidden.data(), ids.data(), rows, 0, logits.data(), nullptr, true);
    return ctx.scratch.capacity();
}

WindowShape Model::window_shape(int64_t rows) const {
    WindowShape w;
    w.rows = rows;
    for (const GgufFile* f : {&file_, &mtp_file()})
        for (const GgufTensorInfo& t : f->tensors()) w.max_in = std::max(w.max_in, t.ne[0]);
    // A shared expert may ride with the routed ones: one more expert row per row.
    if (hp_.n_expert > 0)
        w.expert_rows = rows * (hp_.n_expert_used + (hp_.n_ff_shexp > 0 ? 1 : 0)), w.expert_ff = hp_.n_ff_exp,
        w.n_expert = hp_.n_expert;
    w.n_head = hp_.n_head;
    w.head_dim_v = hp_.head_dim_v;
    w.gdn_heads = hp_.ssm_dt_rank;  // 0 where there are no GDN layers
    return w;
}

std::unique_ptr<StageWeights> Model::bind(Ops& ops, int64_t l0, int64_t l1, bool embed, bool head,
                                          const StagePlacement* placement) const {
    return bind_weights(ops, l0, l1, embed, head, placement);
}

std::unique_ptr<StageWeights> Model::bind_weights(Ops& ops, int64_t l0, int64_t l1, bool embed, bool head,
                                                  const StagePlacement* placement) const {
    if (l1 < 0) l1 = hp_.n_layer;
    STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= hp_.n_layer, "bind: layers [{}, {}) outside 0..{}", l0, l1, hp_.n_layer);
    auto w = std::make_unique<StageWeights>();
    w->l0 = l0;
    w->l1 = l1;
    w->embed = embed;
    w->head = head;
    // Experts in host memory: prepared by the host's op set, run by HostExperts.
    std::function<WeightPlacer*(int64_t)> host_fn;
    std::unique_ptr<OpsPlacer> host_placer;
    if (placement && placement->host_ops && placement->n_cpu_moe != 0 && hp_.moe()) {
        host_placer = std::make_unique<OpsPlacer>(*placement->host_ops);
        const int64_t n = placement->n_cpu_moe;
        host_fn = [this, n, hp = host_placer.get()](int64_t il) -> WeightPlacer* {
            return experts_on_host(il, n) ? hp : nullptr;
        };
        w->host_experts = std::make_unique<HostExperts>(*placement->host_ops, ops, placement->moe_cache_bytes,
                                                        placement->adapt_every);
    }
    if (!placement || !placement->budgeted) {
        OpsPlacer p(ops);
        p.set_host_experts(host_fn);
        for (int64_t il = l0; il < l1; ++il) w->resident.push_back(place_layer(p, il));
        place_fixed(p, *w);
        return w;
    }
    // Under a budget: the fixed block, then each resident layer as a block, then the
    // streamed layers' blocks in host memory and the slots they are copied into.
    w->memory.push_back(place_block(ops, host_fn, [&](WeightPlacer& p, bool keep) {
        if (keep) {
            place_fixed(p, *w);
            return;
        }
        StageWeights tmp;
        tmp.embed = embed;
        tmp.head = head;
        place_fixed(p, tmp);
    }));
    const int64_t n_res = std::min(placement->n_resident, l1 - l0);
    for (int64_t il = l0; il < l0 + n_res; ++il) {
        std::unique_ptr<LayerWeights> L;
        w->memory.push_back(place_block(ops, host_fn, [&](WeightPlacer& p, bool keep) {
            auto placed = place_layer(p, il);
            if (keep) L = std::move(placed);
        }));
        w->resident.push_back(std::move(L));
    }
    if (l0 + n_res == l1) return w;
    STRATA_CHECK(placement->n_slots >= 1, "layers {}..{} are streamed but the placement has no slot", l0 + n_res, l1 - 1);
    std::vector<Buffer> slots;
    for (int k = 0; k < placement->n_slots; ++k) slots.push_back(ops.alloc(placement->slot_bytes));
    std::vector<LayerStream::Layer> streamed;
    for (int64_t il = l0 + n_res; il < l1; ++il) {
        LayerStream::Layer l;
        l.il = il;
        l.bytes = layer_bytes(ops, il, host_fn && host_fn(il));
        if (l.bytes > placement->slot_bytes)
            fail("layer {} needs {} bytes, more than the stream's slots of {}", il, l.bytes, placement->slot_bytes);
        l.host = ops.alloc_staging(std::max<size_t>(l.bytes, 1));
        {
            BlockPlacer write(ops, nullptr, l.host.data());
            write.set_host_experts(host_fn);
            place_layer(write, il);
        }
        for (const Buffer& s : slots) {
            BlockPlacer at(ops, s.data(), nullptr);
            at.set_host_experts(host_fn);
            l.at_slot.push_back(place_layer(at, il));
        }
        streamed.push_back(std::move(l));
        w->resident.push_back(nullptr);
    }
    w->stream = std::make_unique<LayerStream>(ops, std::move(slots), std::move(streamed));
    return w;
}

}  // namespace strata
