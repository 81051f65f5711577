#include "engine/speculative/verifier.h"

#include "engine/core/error.h"

namespace strata {

void Verifier::run(std::span<const int32_t> window, int64_t pos0) {
    STRATA_CHECK(!window.empty(), "verify: empty window");
    adopt(window, pos0);
    if (window.size() > 1) target_.snapshot(static_cast<int64_t>(window.size()));
    target_.run(window_, pos0, /*verify=*/true);
}

void Verifier::adopt(std::span<const int32_t> window, int64_t pos0) {
    window_.assign(window.begin(), window.end());
    pos0_ = pos0;
}

bool Verifier::commit(int64_t m) {
    const int64_t k = static_cast<int64_t>(window_.size()) - 1;
    STRATA_CHECK(m >= 0 && m <= k, "commit: {} drafts kept of {}", m, k);
    if (m == k) return false;
    const std::span<const int32_t> kept(window_.data(), static_cast<size_t>(m + 1));
    if (target_.rollback(kept, pos0_)) return true;
    target_.restore();
    target_.run(kept, pos0_, /*verify=*/false);
    return true;
}

void RunnerTarget::run(std::span<const int32_t> tokens, int64_t pos0, bool verify) {
    STRATA_CHECK(pos0 == runner_.n_past(seq_), "verify: the window starts at {}, the sequence holds {}", pos0,
                 runner_.n_past(seq_));
    if (!verify) {
        const Runner::Item replay{seq_, tokens, false, nullptr};
        runner_.eval(std::span<const Runner::Item>(&replay, 1), nullptr);
        return;
    }
    const auto rows = static_cast<int64_t>(tokens.size());
    reserve(rows);
    rows_ = rows;
    const Runner::Item item{seq_, tokens, true, hidden_.data()};
    runner_.eval(std::span<const Runner::Item>(&item, 1), logits_.data());
}

void RunnerTarget::reserve(int64_t rows) {
    if (rows <= cap_rows_) return;
    const int64_t V = runner_.model().hp().n_vocab, E = runner_.model().hp().n_embd;
    logits_.resize(static_cast<size_t>(rows * V));
    hidden_.resize(static_cast<size_t>(rows * E));
    cap_rows_ = rows;
}

std::span<const float> RunnerTarget::logits(int64_t row) const { return const_cast<RunnerTarget*>(this)->logits(row); }

std::span<float> RunnerTarget::logits(int64_t row) {
    const size_t V = static_cast<size_t>(runner_.model().hp().n_vocab);
    STRATA_CHECK(row >= 0 && row < rows_, "no logits row {}", row);
    return {logits_.data() + static_cast<size_t>(row) * V, V};
}

}  // namespace strata
