// Experts in host memory (--cpu-moe, --n-cpu-moe N): the expert stacks of a stage's
// first N MoE layers stay in host memory, prepared for and computed by a CPU op set of
// the stage's own (the "CPU device" of llama.cpp's spelling), while the rest of the layer
// runs on the stage's device. The rows cross through host memory: the layer's inputs and
// routing come to the host, the routed rows go back. With --moe-cache-mib, a cache of hot
// experts on the device computes the rows routed to them (the host computes the others):
// filled from the routing counts of every host layer and re-ranked every --adapt-every
// windows. Which side computes a row never changes its bits on the CPU backend (the same
// kernels, each row on its own); a GPU's rows differ from the host's by rounding only.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/model/model.h"
#include "engine/model/moe.h"

namespace strata {

class HostExperts {
public:
    // host: the op set the experts run on; dev: the stage's device's. cache_bytes: device
    // memory for hot experts (0: none), allocated here (counted in the device's budget).
    // adapt_every: windows between re-rankings (0: ranked once, after the first window).
    HostExperts(Ops& host, Ops& dev, size_t cache_bytes, int adapt_every);

    // moe_block's expert step for a layer whose experts stay on the host: routed
    // [T * k, n_embd] (device memory) from h [T, n_embd] and the routing ids [T, k].
    void run(ForwardCtx& ctx, const MoeWeights& w, const int32_t* ids, int64_t k, Tensor h, Tensor routed);

    struct Stats {
        int64_t host_rows = 0;    // expert rows computed on the host
        int64_t device_rows = 0;  // expert rows computed by the device's cache (its hits)
        int64_t reranks = 0;
        int64_t cached = 0;       // experts in the cache now
    };
    Stats stats() const;

private:
    struct Layer {
        std::vector<MatView> file[3];  // gate, up, down as the file has them
        std::vector<MatView> host_all[3];  // the host's views of every expert
        std::vector<MatView> host[3];      // the same, with null data where the device computes
        std::vector<MatView> dev[3];   // the cache's views; null data where the host computes
        std::vector<double> count;     // routing counts, halved at every ranking
        std::vector<int> slot;         // the cache slot holding the expert (-1: none)
        bool any_cached = false;
    };
    Layer& layer(const MoeWeights& w);
    size_t expert_bytes(const Layer& L) const;  // one expert's three matrices on the device, aligned
    void rerank();  // on the stage's device (dev_), in its queue's order
    void* host_buffer(int i, size_t bytes);

    Ops& host_;
    Ops& dev_;
    size_t cache_bytes_;
    int adapt_every_;
    Buffer cache_;          // device memory of the cached experts: slots of slot_bytes_
    Buffer cache_staging_;  // one slot's form, written on the host
    size_t slot_bytes_ = 0;  // the largest expert's three matrices (fixed once the first layer registers)
    std::vector<std::pair<int64_t, int64_t>> slots_;  // (layer, expert) per slot; layer -1: free
    Buffer bufs_[3];        // the crossing rows: h, ids, routed (Ops::alloc_staging)
    std::map<int64_t, Layer> layers_;  // by model layer
    int64_t first_ = -1;    // the stage's first host layer: each of its runs is a window
    int64_t windows_ = 0;
    std::atomic<int64_t> host_rows_{0}, device_rows_{0}, reranks_{0}, cached_{0};
};

}  // namespace strata
