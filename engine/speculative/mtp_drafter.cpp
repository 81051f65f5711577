#include "engine/speculative/mtp_drafter.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/sample/sampler.h"
#include "engine/sample/softmax.h"

namespace strata {

namespace {
// softmax(logits)[id] at temperature 1 for id the argmax: the whole-vocabulary draw's
// SIMD exponentials (engine/sample/softmax.h; a double exp per token cost ~2% of a
// speculative run at a 32k vocabulary) and their sum in double.
float probability(std::span<const float> logits, int32_t id, std::vector<float>& exps) {
    exps.resize(logits.size());
    exp_shifted(logits, logits[static_cast<size_t>(id)], 1.0f, exps.data());
    return static_cast<float>(1.0 / sum_fixed(exps));
}
}  // namespace

MtpChain::MtpChain(int64_t n_embd, int64_t n_vocab, int64_t draft_vocab, int64_t chunk)
    : E_(n_embd), chunk_(chunk), vocab_(n_vocab, draft_vocab) {
    STRATA_CHECK(chunk > 0, "MTP chunk must be positive");
    logits_.resize(static_cast<size_t>(n_vocab));
}

void MtpChain::feed(const MtpCall& mtp, const float* hidden, const int32_t* next_tokens, int64_t T, int64_t pos0,
                    bool logits) {
    STRATA_CHECK(T > 0, "draft: no committed pairs to feed");
    vocab_.observe(std::span<const int32_t>(next_tokens, static_cast<size_t>(T)));
    // Only the last chunk's last row matters for the chain (its logits give the next
    // draft, its hidden feeds the next step).
    for (int64_t c0 = 0; c0 < T; c0 += chunk_) {
        const int64_t n = std::min(chunk_, T - c0);
        const bool last = c0 + n == T;
        if (last) hid_.resize(static_cast<size_t>(E_));  // the last pair's row
        mtp(hidden + c0 * E_, next_tokens + c0, n, pos0 + c0, last && logits ? logits_.data() : nullptr,
            last ? hid_.data() : nullptr, vocab_.rows());
    }
    live_ = head_rows();
    next_pos_ = pos0 + T;
    pending_ = false;
    have_logits_ = logits;
}

void MtpChain::step(const MtpCall& mtp, int32_t token, bool logits) {
    STRATA_CHECK(!hid_.empty(), "the MTP chain has not been fed");
    const float* h = hid_.data();  // the last pair's row
    hid_next_.resize(static_cast<size_t>(E_));
    // The LM head is most of a draft step on a small model (a 32k x n_embd head against
    // one layer), so the steps whose prediction is overridden skip it.
    mtp(h, &token, 1, next_pos_++, logits ? logits_.data() : nullptr, hid_next_.data(), vocab_.rows());
    if (logits) live_ = head_rows();
    std::swap(hid_, hid_next_);
    have_logits_ = logits;
}

void MtpChain::force(const MtpCall& mtp, std::span<const int32_t> tokens) {
    if (tokens.empty()) return;
    if (pending_) step(mtp, pending_token_, false);
    pending_ = false;
    for (size_t i = 0; i < tokens.size(); ++i) step(mtp, tokens[i], i + 1 == tokens.size());
}

void MtpChain::draft(const MtpCall& mtp, int n, float min_p, Draft& out) {
    for (int i = 0; i < n; ++i) {
        if (pending_) step(mtp, pending_token_);
        pending_ = false;
        STRATA_CHECK(have_logits_, "the MTP chain's last step ran without its LM head (feed without logits, no force)");
        // Only the draft vocabulary's ids: the head leaves the others at -infinity, whose
        // exponentials add exactly 0 to each of sum_fixed's four lanes (the prefix is a
        // multiple of 256 ids), so the same draft and probability for an eighth of the work
        // at a 32k vocabulary.
        const std::span<const float> live(logits_.data(), static_cast<size_t>(live_));
        const int32_t d = argmax(live);
        const float pd = probability(live, d, exps_);
        if (pd < min_p) break;  // unsure: a short window costs less than a likely rejection
        out.tokens.push_back(d);
        out.probs.push_back(pd);
        pending_ = true;  // its step runs only if the chain goes on
        pending_token_ = d;
    }
}

MtpDrafter::MtpDrafter(Runner& runner, int seq, float min_p, int64_t chunk)
    : runner_(runner),
      seq_(seq),
      min_p_(min_p),
      chain_(runner.model().hp().n_embd, runner.model().hp().n_vocab, runner.draft_vocab(), chunk) {
    STRATA_CHECK(runner.has_mtp(), "speculative decoding needs a model with an MTP head");
    call_ = [this](const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits, float* hidden_out,
                   int64_t rows) { runner_.mtp(seq_, hidden, tokens, T, pos0, logits, hidden_out, rows); };
}

void MtpDrafter::draft(const float* hidden, const int32_t* next_tokens, int64_t T, int64_t pos0, int k, Draft& out) {
    out.tokens.clear();
    out.probs.clear();
    chain_.feed(call_, hidden, next_tokens, T, pos0);
    chain_.draft(call_, k, min_p_, out);
}

}  // namespace strata
