// What a stage holds under a device budget whatever the plan (engine/model/placement.h's
// request, its budget left 0): the embedding table, head and MTP block, the state of
// cfg.max_sequences sequences with their snapshots, the largest window's buffers
// (cfg.max_rows), and what the device holds already, measured on ops's device.
#pragma once
#include "engine/model/placement.h"
#include "engine/split/plan.h"
#include "engine/split/split_runner.h"

namespace strata {

PlacementRequest stage_request(const Model& m, Ops& ops, const StagePlan& sp, bool first, bool last,
                               const SplitConfig& cfg, int64_t n_ctx, GgmlType cache_type);

}  // namespace strata
