#include "engine/backend/weight_store.h"

#include <algorithm>

namespace strata {

namespace {
constexpr size_t kChunk = size_t{64} << 20;
}  // namespace

void* WeightStore::alloc(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (chunks_.empty() || used_ + bytes > chunks_.back().size()) {
        chunks_.emplace_back(std::max(kChunk, bytes));  // untouched pages cost nothing
        used_ = 0;
    }
    void* out = chunks_.back().data() + used_;
    used_ += bytes;
    used_total_ += bytes;
    return out;
}

}  // namespace strata
