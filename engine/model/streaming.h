// The streamed layers of a stage (--stream-layers under a --max-vram budget): each
// layer's weights live in host memory as one block in the device's own form (written
// once, at bind), and are copied into one of the stage's slots of device memory before
// the layer runs. With two slots (prefetch depth 1) the next streamed layer's copy
// starts on the device's copy queue when a layer starts, so it lands while that layer
// computes; after the stage's last streamed layer the next window's first one follows.
// A layer still in a slot from an earlier window is not copied again.
//
// Every decision is made on the device's queue thread (Model::run_layers calls enter
// before each layer), so the stream needs no lock; the counters are read from others.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/model/model.h"

namespace strata {

class LayerStream {
public:
    struct Layer {
        int64_t il = 0;
        Buffer host;  // the block in host memory (Ops::alloc_staging)
        size_t bytes = 0;
        std::vector<std::unique_ptr<LayerWeights>> at_slot;  // the layer's views in each slot
    };
    // slots: n_slots blocks of ops's device memory, each at least as large as every
    // layer's block.
    LayerStream(Ops& ops, std::vector<Buffer> slots, std::vector<Layer> layers);
    // Waits for the copies still in flight (a prefetch for a window that never came)
    // before their source and destination go.
    ~LayerStream();
    LayerStream(const LayerStream&) = delete;
    LayerStream& operator=(const LayerStream&) = delete;

    void* slot(int s) const { return slots_[static_cast<size_t>(s)].data(); }
    int n_slots() const { return static_cast<int>(slots_.size()); }
    bool streams(int64_t il) const { return index(il) >= 0; }

    // Before layer il runs on ops's device (a no-op for a layer that is not streamed).
    void enter(Ops& ops, int64_t il);
    const LayerWeights& layer(int64_t il) const;
    // Waits for every copy in flight and forgets what the slots hold (a restart: the
    // device's queue was drained; nothing stale survives).
    void release(Ops& ops);

    struct Stats {
        int64_t copies = 0;         // layers copied into a slot
        int64_t bytes = 0;          // their bytes
        int64_t prefetch_hits = 0;  // a layer found copied or in flight ahead of its turn
        int64_t sync_loads = 0;     // a layer copied only when its turn came (depth 0, or a miss)
        int64_t reused = 0;         // a layer still in its slot from an earlier window
        double wait_ms = 0;         // host time spent waiting for copies
    };
    Stats stats() const;
    bool prefetching() const { return prefetch_; }
    // Test seam: the n-th prefetch (1-based) fails to start, as a copy queue that throws
    // would make it (0: none).
    void fail_prefetch(int n) { fail_prefetch_at_ = n; }

private:
    int64_t index(int64_t il) const;
    void copy_into(Ops& ops, int s, int64_t j, bool prefetch = false);
    void settle(Ops& ops, int s);  // the copy in flight into slot s (if any) awaited

    struct Slot {
        int64_t layer = -1;    // index into layers_ of what it holds or receives (-1: none)
        uint64_t ticket = 0;   // the copy in flight (0: none): a prefetch until its layer enters
    };
    Ops& ops_;
    std::vector<Buffer> slots_;
    std::vector<Layer> layers_;  // consecutive model layers
    std::vector<Slot> state_;
    int active_ = -1;            // the slot of the layer that ran last
    bool prefetch_ = true;       // off once a prefetch could not start
    int fail_prefetch_at_ = 0, prefetches_ = 0;  // fail_prefetch
    std::atomic<int64_t> copies_{0}, bytes_{0}, hits_{0}, sync_{0}, reused_{0};
    std::atomic<int64_t> wait_ns_{0};
};

}  // namespace strata
