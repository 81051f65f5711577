// A stage under its device's budget (--max-vram): what the stage holds whatever the
// plan is measured on the device (or on an op set that computes nothing, for the
// window's buffers), and the planner decides the rest (engine/model/placement.h).
#include <spdlog/spdlog.h>

#include "engine/model/placement.h"
#include "engine/split/snapshot.h"
#include "engine/split/split_runner_impl.h"
#include "engine/split/stage_placement.h"

namespace strata {

PlacementRequest stage_request(const Model& m, Ops& ops, const StagePlan& sp, bool first, bool last,
                               const SplitConfig& cfg, int64_t n_ctx, GgmlType cache_type) {
    PlacementRequest req;
    req.device = sp.device;
    req.stream = cfg.stream_layers;
    req.depth = cfg.prefetch_depth;
    for (int64_t il = sp.l0; il < sp.l1; ++il)
        req.layer_bytes.push_back(static_cast<int64_t>(m.layer_bytes(ops, il, m.experts_on_host(il, cfg.n_cpu_moe))));
    // A sequence's state (KV cache, GDN state) as the device allocates it, and the GDN
    // snapshots speculation keeps per sequence (one, plus the pipeline's slots), ...
    int64_t per_seq = 0;
    {
        const int64_t before = ops.meter().used();
        SeqState s = m.new_state(ops, n_ctx, cache_type, sp.l0, sp.l1, last);
        per_seq = ops.meter().used() - before;
        const int64_t gdn = s.gdn ? static_cast<int64_t>(s.gdn->bytes()) : 0;
        per_seq += gdn * (1 + (cfg.pipeline_windows == 2 ? StagePipe::kSnapSlots : 0));
        // and the inputs a verify window keeps for its rollback (GdnLog; the pipeline parks
        // a second one while an early window runs)
        if (s.gdn)
            per_seq += static_cast<int64_t>(GdnLog::bytes(s.gdn->n_layers(), s.gdn->conv_dim(), s.gdn->nv())) *
                       (cfg.pipeline_windows == 2 ? 2 : 1);
    }
    const int64_t rows = std::max<int64_t>(cfg.max_rows, 1);
    const int64_t act_rows = sizeof(float) * static_cast<size_t>(rows * m.hp().n_embd);
    // The window's buffers, the stage's activations, and the pipeline's second set.
    const int64_t window = static_cast<int64_t>(m.window_bytes(sp.l0, sp.l1, first, last, rows)) + act_rows +
                           ops.scratch_bytes(m.window_shape(rows)) +
                           (cfg.pipeline_windows == 2
                                ? static_cast<int64_t>(4 * sizeof(float)) * StagePipe::kMaxRows * m.hp().n_embd
                                : 0);
    req.fixed = static_cast<int64_t>(m.fixed_bytes(ops, first, last)) + per_seq * std::max<int64_t>(cfg.max_sequences, 1) +
                window + ops.meter().used() +
                (m.experts_on_host(sp.l0, cfg.n_cpu_moe) ? static_cast<int64_t>(cfg.moe_cache_bytes) : 0);
    return req;
}

namespace split_detail {

std::unique_ptr<StagePlacement> plan_stage(const Model& m, Device& dev, Device* host, const StagePlan& sp, bool first,
                                           bool last, const SplitConfig& cfg, int64_t n_ctx, GgmlType cache_type,
                                           std::string* line) {
    auto with_host = [&](StagePlacement p) {
        if (host) {
            p.host_ops = &host->ops();
            p.n_cpu_moe = cfg.n_cpu_moe;
            p.moe_cache_bytes = cfg.moe_cache_bytes;
            p.adapt_every = cfg.adapt_every;
        }
        return std::make_unique<StagePlacement>(p);
    };
    auto it = cfg.budgets.find(sp.device);
    if (it == cfg.budgets.end()) {
        if (!host) return nullptr;
        StagePlacement p;
        p.budgeted = false;
        p.n_resident = sp.l1 - sp.l0;
        return with_host(p);
    }
    Ops& ops = dev.ops();
    const int64_t have = dev.memory_bytes();
    // The device's meter refuses past the whole budget; the planner plans within the
    // budget less the reserve (room for what the runtime allocates beside its count).
    int64_t budget = it->second;
    if (budget < 0) {
        // auto: what is free on the device now (its driver's figure, before this stage
        // allocates anything but its op set's own few buffers).
        const int64_t free = dev.free_memory_bytes();
        if (free <= 0)
            fail("--max-vram {}=auto: this device does not report its memory; give a size (e.g. {}=8GiB)", sp.device,
                 sp.device);
        budget = free + ops.meter().used();
    } else if (have > 0 && budget > have) {
        spdlog::warn("{}: a budget of {:.1f} MiB is more than the device's {:.1f} MiB; using {:.1f} MiB", sp.device,
                     MemoryMeter::mib(budget), MemoryMeter::mib(have), MemoryMeter::mib(have));
        budget = have;
    }
    if (budget - cfg.vram_reserve <= 0)
        fail("{}: --vram-reserve-mib ({:.1f} MiB) leaves nothing of the budget of {:.1f} MiB", sp.device,
             MemoryMeter::mib(cfg.vram_reserve), MemoryMeter::mib(budget));
    PlacementRequest req = stage_request(m, ops, sp, first, last, cfg, n_ctx, cache_type);
    req.budget = budget - cfg.vram_reserve;
    ops.meter().set_limit(budget);  // after the measuring: the planner names what is missing
    const PlacementPlan plan = plan_placement(req);
    *line = plan.describe(req);
    spdlog::info("placement: {}", *line);
    return with_host(plan.placement);
}

}  // namespace split_detail
}  // namespace strata
