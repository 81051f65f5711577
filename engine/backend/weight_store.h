#pragma once
#include <cstddef>
#include <vector>

#include "engine/core/huge_buffer.h"

namespace strata {

// Memory for the weights a CPU device prepares (CpuOps::prepare_weight: packed copies): a few large anonymous mappings, with transparent
// huge pages where the system allows them (madvise). Decode streams every weight once per
// token; 2 MiB pages spare it a TLB miss, and a stop of the hardware prefetcher, every
// 4 KiB (about a fifth of the bandwidth on the machine of docs/benchmarks.md).
class WeightStore {
public:
    WeightStore() = default;
    WeightStore(const WeightStore&) = delete;
    WeightStore& operator=(const WeightStore&) = delete;

    void* alloc(size_t bytes);  // 64-byte aligned, lives as long as the store
    size_t bytes() const { return used_total_; }

private:
    std::vector<HugeBuffer> chunks_;  // 64 MiB, or one large matrix each
    size_t used_ = 0;  // in the last chunk
    size_t used_total_ = 0;
};

}  // namespace strata
