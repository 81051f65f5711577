#include "engine/speculative/draft_vocab.h"

#include <algorithm>

#include "engine/core/error.h"

namespace strata {

namespace {
// A whole number of the CPU's packed row groups (16) and of GPU tiles: a prefix of the
// head's rows is then a view of the same memory.
int64_t round_rows(int64_t n) { return (n + 255) / 256 * 256; }
}  // namespace

DraftVocab::DraftVocab(int64_t n_vocab, int64_t setting) : n_vocab_(n_vocab), adapt_(setting < 0) {
    STRATA_CHECK(setting >= -1, "draft vocabulary: {} (0 = every id, N, or -1 = auto)", setting);
    n_ = setting == 0 ? n_vocab : round_rows(setting < 0 ? kAutoStart : setting);
    if (adapt_) ring_.reserve(static_cast<size_t>(kHistory));
}

int64_t DraftVocab::misses() const {
    return std::count_if(ring_.begin(), ring_.end(), [this](int32_t t) { return t >= n_; });
}

void DraftVocab::observe(std::span<const int32_t> tokens) {
    if (!adapt_ || n_ >= n_vocab_) return;
    for (int32_t t : tokens) {
        if (ring_.size() < static_cast<size_t>(kHistory)) {
            ring_.push_back(t);
        } else {
            ring_[next_] = t;
            next_ = (next_ + 1) % ring_.size();
        }
        if (t < n_) continue;  // only a token past the prefix can call for a wider one
        int64_t m = misses();
        while (n_ < n_vocab_ && m >= kMinMisses && m * kMissRatio > static_cast<int64_t>(ring_.size())) {
            n_ = std::min(n_vocab_, round_rows(2 * n_));
            m = misses();
        }
        if (n_ >= n_vocab_) return;
    }
}

}  // namespace strata
