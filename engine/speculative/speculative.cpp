#include "engine/speculative/speculative.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/speculative/accept.h"

namespace strata {

SpecDecoder::SpecDecoder(Runner& runner, int seq, const Sampler& sampler, const SpecOptions& opt)
    : runner_(runner),
      seq_(seq),
      sampler_(sampler),
      opt_(opt),
      drafter_(runner, seq, opt.draft_min_p),
      target_(runner, seq),
      verifier_(target_) {
    STRATA_CHECK(opt.k >= 1, "speculative decoding needs k >= 1, got {}", opt.k);
    stats_.drafted_at.assign(static_cast<size_t>(opt.k), 0);
    stats_.accepted_at.assign(static_cast<size_t>(opt.k), 0);
    target_.reserve(opt.k + 1);
}

void SpecDecoder::start(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first, int64_t from) {
    const int64_t E = runner_.model().hp().n_embd, n = static_cast<int64_t>(prompt.size());
    STRATA_CHECK(n > 0 && from >= 0 && from < n, "start: prompt of {} tokens from {}", n, from);
    // Pairs (H[p], x_{p+1}) for from <= p < n: x_{p+1} is the next prompt token, then `first`.
    pend_.from_prompt(prompt_hidden, prompt, first, E, from);
    drafter_.chain().observe(prompt.first(static_cast<size_t>(from)));  // the rest comes with the pairs
    stats_.draft_rows = drafter_.chain().draft_rows();
    last_ = first;
}

void SpecDecoder::step(int64_t max_emit, std::vector<int32_t>& out, int k_round) {
    STRATA_CHECK(max_emit >= 1, "step: nothing to emit");
    STRATA_CHECK(k_round >= 0 && k_round <= opt_.k, "step: {} drafts asked, the decoder takes 1..{}", k_round, opt_.k);
    const int64_t V = runner_.model().hp().n_vocab, E = runner_.model().hp().n_embd;
    // Never draft more than may be emitted: the window then also fits the context
    // whenever plain decoding would have.
    const int k = static_cast<int>(std::min<int64_t>(k_round > 0 ? k_round : opt_.k, max_emit - 1));
    drafter_.draft(pend_.hidden.data(), pend_.tokens.data(), pend_.size(), pend_.pos0, k, draft_);
    if (opt_.edit_draft) {
        opt_.edit_draft(runner_.n_past(seq_), k, draft_);
        STRATA_CHECK(static_cast<int>(draft_.tokens.size()) <= k, "edit_draft made {} drafts, k is {}",
                     draft_.tokens.size(), k);
    }
    const int64_t kd = static_cast<int64_t>(draft_.tokens.size());

    // Verify window [last, d_1..d_k'] at positions n0..n0+k': all logits, all hiddens.
    window_.assign(1, last_);
    window_.insert(window_.end(), draft_.tokens.begin(), draft_.tokens.end());
    const int64_t n0 = runner_.n_past(seq_);
    verifier_.run(window_, n0);

    // Slot i's target distribution comes from row i (verify_window: the sampler's own
    // greedy rule, or MODEL_SPEC 6.3 with q a point mass at the greedy draft).
    const WindowOutcome o = verify_window(sampler_, target_.logits(0).data(), V, draft_.tokens, probs_, opt_.matcher);
    const int64_t m = o.accepted;
    const int32_t y = o.token;

    stats_.add_window(kd, m);

    // Commit [last, d_1..d_m]: a rejection restores the state from before the window
    // and replays the kept tokens.
    if (verifier_.commit(m)) ++stats_.rollbacks;
    stats_.snapshot_bytes = runner_.snapshot_bytes();
    stats_.draft_rows = drafter_.chain().draft_rows();

    for (int64_t i = 0; i < m; ++i) out.push_back(draft_.tokens[static_cast<size_t>(i)]);
    out.push_back(y);
    // The next chain first feeds the committed pairs (H[n0+i], token after it), i <= m.
    pend_.reset(n0);
    window_.assign(draft_.tokens.begin(), draft_.tokens.begin() + m);
    window_.push_back(y);
    pend_.append(target_.hidden(), window_, E);
    last_ = y;
}

void SpecDecoder::advance(const float* hidden, int32_t next, bool paused) {
    const int64_t E = runner_.model().hp().n_embd;
    pend_.append(hidden, std::span<const int32_t>(&next, 1), E);
    last_ = next;
    if (paused) {
        pend_.keep_last(kPausedPairs, E);
        return;
    }
    constexpr int64_t kMaxPending = 256;
    if (pend_.size() > kMaxPending) feed_but_newest();
}

void SpecDecoder::feed_but_newest() {
    // Keep the newest pair: the next chain starts from its MTP output.
    const int64_t T = pend_.size();
    if (T <= 1) return;
    drafter_.draft(pend_.hidden.data(), pend_.tokens.data(), T - 1, pend_.pos0, 0, draft_);
    pend_.keep_last(1, runner_.model().hp().n_embd);
}

bool SpecDecoder::settle(std::vector<float>& row) {
    // The newest pending pair must be the sequence's last position's.
    if (pend_.size() == 0 || pend_.pos0 + pend_.size() != runner_.n_past(seq_)) return false;
    feed_but_newest();
    row = pend_.hidden;
    return true;
}

int32_t SpecDecoder::guess() {
    drafter_.draft(pend_.hidden.data(), pend_.tokens.data(), pend_.size(), pend_.pos0, 1, draft_);
    if (opt_.edit_draft) opt_.edit_draft(runner_.n_past(seq_), 1, draft_);
    pend_.reset(pend_.pos0 + pend_.size());
    return draft_.tokens.empty() ? -1 : draft_.tokens.front();
}

std::span<const float> SpecDecoder::logits(size_t i) const { return target_.logits(static_cast<int64_t>(i)); }

}  // namespace strata
