// The placement planner (--max-vram, --stream-layers, --layer-prefetch-depth): from a
// stage's budget and the sizes of what it holds, how many of its leading layers stay in
// device memory and how the rest stream through slots. As the seed's maintainer kept it:
// the resident count is automatic (as many leading layers as the budget permits, no
// user-facing knob), the prefetch window has priority over optional residents, and the
// depth is reduced to 0 (never the budget exceeded) when one more slot does not fit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace strata {

struct PlacementRequest {
    std::string device;               // for messages: "cuda:0"
    int64_t budget = 0;               // bytes of device memory the stage may use (> 0)
    int64_t fixed = 0;                // bytes whatever the plan: the embedding table, head and MTP block,
                                      // sequence state, activations, hand-off buffers, the reserve
    std::vector<int64_t> layer_bytes;  // each layer of the stage, in order
    bool stream = false;              // --stream-layers
    int depth = 1;                    // --layer-prefetch-depth, 0 or 1
};

struct PlacementPlan {
    StagePlacement placement;
    int depth = 0;         // the effective prefetch depth
    int64_t peak = 0;      // bytes of the budget the plan uses at most
    int64_t n_layers = 0;
    bool depth_reduced = false;  // the asked depth did not fit
    // "cpu:0: 5 layers resident, 3 streamed (2 slots of 1.2 MiB, prefetch 1), peak 9.1 of 10.0 MiB"
    std::string describe(const PlacementRequest& r) const;
};

// Throws strata::Error when nothing fits (naming the minimum budget), or when the
// layers do not all fit and streaming is off (naming what --stream-layers would need).
PlacementPlan plan_placement(const PlacementRequest& r);

}  // namespace strata

namespace strata {

// The smallest budget in which plan_placement keeps the first n_resident layers of r
// and streams the others with the given depth (n_resident = all: no streaming).
int64_t budget_for(const PlacementRequest& r, int64_t n_resident, int depth);

}  // namespace strata
