// A runner's first window, run before the first request's (Scheduler::warm_up in the
// server; docs/server.md "Warm-up"). `strata run` has none: generate() makes its own
// sequence, so a window through another one would warm only the shared buffers.
#pragma once
#include <cstdint>
#include <span>

#include "engine/run/runner.h"

namespace strata {

// One window of `token` in each of `seqs` (empty sequences), an MTP step each where the
// runner has an MTP head, then every one of them emptied again. The memory a window
// writes (the KV cache's first pages, the recurrent states, the activations: 2 MiB pages
// each on a CPU) is touched here rather than in the first request, and a device sets up
// whatever its first window needs. Throws what the window throws (the sequences are
// reset either way). Returns its milliseconds.
double warm_up(Runner& r, std::span<const int> seqs, int32_t token);

}  // namespace strata
