#include "engine/speculative/verifier.h"

#include "engine/core/error.h"

namespace strata {

Verifier::Verifier(Runner& runner, int seq) : runner_(runner), seq_(seq) {}

void Verifier::run(std::span<const int32_t> window) {
    STRATA_CHECK(!window.empty(), "verify: empty window");
    const int64_t V = runner_.model().hp().n_vocab, E = runner_.model().hp().n_embd;
    const int64_t rows = static_cast<int64_t>(window.size());
    window_.assign(window.begin(), window.end());
    logits_.resize(static_cast<size_t>(rows * V));
    hidden_.resize(static_cast<size_t>(rows * E));
    n0_ = runner_.n_past(seq_);
    if (rows > 1) runner_.snapshot(seq_);
    const Runner::Item item{seq_, window_, true, hidden_.data()};
    runner_.eval(std::span<const Runner::Item>(&item, 1), logits_.data());
}

bool Verifier::commit(int64_t m) {
    const int64_t k = static_cast<int64_t>(window_.size()) - 1;
    STRATA_CHECK(m >= 0 && m <= k, "commit: {} drafts kept of {}", m, k);
    if (m == k) return false;
    runner_.restore(seq_);
    const Runner::Item replay{seq_, std::span<const int32_t>(window_.data(), static_cast<size_t>(m + 1)), false,
                              nullptr};
    runner_.eval(std::span<const Runner::Item>(&replay, 1), nullptr);
    return true;
}

std::span<const float> Verifier::logits(int64_t row) const {
    return const_cast<Verifier*>(this)->logits(row);
}

std::span<float> Verifier::logits(int64_t row) {
    const size_t V = static_cast<size_t>(runner_.model().hp().n_vocab);
    STRATA_CHECK(row >= 0 && (static_cast<size_t>(row) + 1) * V <= logits_.size(), "no logits row {}", row);
    return {logits_.data() + static_cast<size_t>(row) * V, V};
}

}  // namespace strata
