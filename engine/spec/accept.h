// The acceptance rule of speculative sampling (MODEL_SPEC 6.3), as pure functions so
// that it can be tested on hand-made distributions: for one slot, accept the draft d
// with probability min(1, p(d)/q(d)), else emit a sample of norm(max(0, p - q)). The
// emitted token is then distributed exactly as p, whatever q is.
#pragma once
#include <cstdint>
#include <random>
#include <span>

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

// A draw from p by one uniform u in [0, 1) against the cumulative sum in id order, as
// Sampler::sample draws (reproducible for a seed).
int32_t sample_index(std::span<const float> p, double u);

}  // namespace strata
