#include "engine/model/placement.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata {

namespace {

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

PlacementPlan plan_placement(const PlacementRequest& r) {
    STRATA_CHECK(r.budget > 0 && r.fixed >= 0 && (r.depth == 0 || r.depth == 1), "bad placement request");
    const auto n = static_cast<int64_t>(r.layer_bytes.size());
    int64_t all = r.fixed;
    for (int64_t b : r.layer_bytes) all += b;
    PlacementPlan p;
    p.n_layers = n;
    if (all <= r.budget) {
        p.placement.n_resident = n;
        p.peak = all;
        return p;
    }
    const int64_t largest = n > 0 ? *std::max_element(r.layer_bytes.begin(), r.layer_bytes.end()) : 0;
    const int64_t minimum = r.fixed + largest;  // nothing resident, one slot
    if (r.budget < minimum || n == 0)
        fail("{}: a budget of {:.1f} MiB is too small: this stage needs at least {:.1f} MiB ({:.1f} MiB of head, "
             "embedding, state and activations, and {:.1f} MiB for its largest layer{})",
             r.device, mib(r.budget), mib(minimum), mib(r.fixed), mib(largest),
             r.stream ? "" : ", with --stream-layers");
    if (!r.stream)
        fail("{}: the stage needs {:.1f} MiB and its budget is {:.1f} MiB; --stream-layers keeps what fits and streams "
             "the other layers from host memory (from {:.1f} MiB)",
             r.device, mib(all), mib(r.budget), mib(minimum));
    // suffix_max[i]: the largest layer of [i, n), the size of a slot when [0, i) stay.
    std::vector<int64_t> suffix_max(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = n - 1; i >= 0; --i)
        suffix_max[static_cast<size_t>(i)] = std::max(suffix_max[static_cast<size_t>(i) + 1], r.layer_bytes[static_cast<size_t>(i)]);
    for (int depth = r.depth; depth >= 0; --depth) {
        int64_t prefix = 0, best = -1, best_peak = 0;
        for (int64_t res = 0; res < n; ++res) {  // res resident, the rest streamed
            const int64_t peak = r.fixed + prefix + (1 + depth) * suffix_max[static_cast<size_t>(res)];
            if (peak <= r.budget) best = res, best_peak = peak;
            prefix += r.layer_bytes[static_cast<size_t>(res)];
        }
        if (best < 0) continue;
        p.placement.n_resident = best;
        p.placement.n_slots = 1 + depth;
        p.placement.slot_bytes = static_cast<size_t>(suffix_max[static_cast<size_t>(best)]);
        p.depth = depth;
        p.depth_reduced = depth < r.depth;
        p.peak = best_peak;
        return p;
    }
    fail("{}: no placement fits a budget of {:.1f} MiB", r.device, mib(r.budget));  // unreachable: depth 0 fits minimum
}

std::string PlacementPlan::describe(const PlacementRequest& r) const {
    const int64_t streamed = n_layers - placement.n_resident;
    if (streamed == 0)
        return fmt::format("{}: all {} layers resident, peak {:.1f} of {:.1f} MiB", r.device, n_layers, mib(peak),
                           mib(r.budget));
    return fmt::format("{}: {} layers resident, {} streamed ({} slot{} of {:.1f} MiB, prefetch depth {}{}), peak {:.1f} "
                       "of {:.1f} MiB",
                       r.device, placement.n_resident, streamed, placement.n_slots, placement.n_slots == 1 ? "" : "s",
                       mib(static_cast<int64_t>(placement.slot_bytes)), depth,
                       depth_reduced ? ", reduced to fit" : "", mib(peak), mib(r.budget));
}

}  // namespace strata

namespace strata {

int64_t budget_for(const PlacementRequest& r, int64_t n_resident, int depth) {
    int64_t b = r.fixed, largest = 0;
    for (size_t i = 0; i < r.layer_bytes.size(); ++i) {
        if (static_cast<int64_t>(i) < n_resident) b += r.layer_bytes[i];
        else largest = std::max(largest, r.layer_bytes[i]);
    }
    return b + (largest > 0 ? (1 + depth) * largest : 0);
}

}  // namespace strata
