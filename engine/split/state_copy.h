// Host copies of one stage's part of a sequence's state, the bodies of
// Runner::save_state / load_state (engine/run/runner.h has the layout). They run on the
// stage's device (queued there, as snapshots are), and copy through Ops::to_host /
// to_device, so a GPU's KV rows come back the same way a CPU's do.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/backend/ops.h"
#include "engine/run/runner.h"
#include "engine/state/seq_state.h"

namespace strata::split_detail {

size_t kv_pos_bytes(const SeqState& s);     // one position of every attention layer of the stage
size_t recurrent_bytes(const SeqState& s);  // its Gated DeltaNet state (0: none)

// r.host points at this stage's runs (the caller adds the stages before it).
void save_kv(Ops& ops, const SeqState& s, const Runner::KvRange& r);
void load_kv(Ops& ops, SeqState& s, const Runner::KvRange& r);
void save_recurrent(Ops& ops, const SeqState& s, uint8_t* dst);
void load_recurrent(Ops& ops, SeqState& s, const uint8_t* src);

}  // namespace strata::split_detail
