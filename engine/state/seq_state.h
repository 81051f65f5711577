// Everything one sequence carries between windows: the KV cache of its attention
// layers, the recurrent state of its Gated DeltaNet layers, and its length.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/state/gdn_log.h"
#include "engine/state/gdn_state.h"
#include "engine/state/kv_cache.h"

namespace strata {

struct SeqState {
    int64_t n_ctx = 0;
    int64_t n_past = 0;                 // tokens already in the state
    std::unique_ptr<KvCache> kv;        // attention layers (qwen3next: MTP blocks too, after the main ones)
    std::vector<int64_t> kv_slot;       // model layer (MTP blocks: n_layer + i) -> KV layer index (-1: none)
    std::unique_ptr<GdnState> gdn;      // Gated DeltaNet layers; null for dense models
    std::vector<int64_t> gdn_slot;      // model layer -> GdnState layer index (-1: not recurrent)
    std::unique_ptr<GdnLog> gdn_log;    // a verify window's GDN inputs (null until the first one)
};

}  // namespace strata
