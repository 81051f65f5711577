// The acceptance rule of speculative sampling (MODEL_SPEC 6.3), as pure functions so
// that it can be tested on hand-made distributions: for one slot, accept the draft d
// with probability min(1, p(d)/q(d)), else emit a sample of norm(max(0, p - q)). The
// emitted token is then distributed exactly as p, whatever q is.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sample/grammar_matcher.h"
#include "engine/sample/sampler.h"

namespace strata {

struct SlotOutcome {
    bool accepted;  // the draft was kept
    int32_t token;  // the draft when accepted, else the resampled correction
};

// p: the target's final sampling distribution over the vocabulary (after penalties,
// temperature and truncation; sums to 1). q: the distribution the draft was drawn
// from; empty means a point mass at `draft` (a greedy drafter), for which the rule is
// "accept with p(d), else sample p with d removed". rng: one uniform for the
// acceptance, one more for a resample.
SlotOutcome verify_slot(std::span<const float> p, std::span<const float> q, int32_t draft, std::mt19937_64& rng);

// sample_index (the draw by one uniform against the cumulative sum) is in sampler.h.

// A whole verify window: logits rows [drafts.size() + 1, n_vocab] (modified in place by
// the penalties), the drafts d_1..d_k. Slot i's target distribution comes from row i,
// and its token is the one the sampler itself would draw at that position (greedy:
// argmax after the penalties; otherwise the draw by the sampler's uniform for that
// position, Sampler::uniform(i)). A draft is kept when it equals that token; the first
// that does not is replaced by it, and after a fully kept window it is the bonus. For
// a greedy drafter (q a point mass at d) a draft is kept with probability p(d), as
// verify_slot's rule keeps it, and the emitted tokens are exactly the ones plain
// decoding gives for the same seed: speculation never changes a seeded request's text.
// probs: scratch. The sampler's position must be the window's first (its accepted
// tokens end where the window starts).
struct WindowOutcome {
    int64_t accepted;
    int32_t token;
};
// matcher (not null): the request's grammar. Each position's token is then the one
// sample_constrained would pick there (pick_constrained), and the matcher takes each kept
// draft as it is kept, so that it stands after them when this returns; the final token is
// the caller's to accept. A kept end of generation ends the window (returned as the
// final token): nothing follows it.
WindowOutcome verify_window(const Sampler& sampler, float* logits, int64_t n_vocab, std::span<const int32_t> drafts,
                            std::vector<float>& probs, GrammarMatcher* matcher = nullptr);

}  // namespace strata
