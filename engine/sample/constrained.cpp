#include "engine/sample/constrained.h"

#include <limits>
#include <vector>

#include "engine/core/error.h"

namespace strata {

namespace {

constexpr uint64_t kRetryStream = 1;

int32_t masked_argmax(std::span<const float> logits, const TokenMask& mask) {
    int32_t best = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
        const auto id = static_cast<int32_t>(i);
        if (mask_allows(mask, id) && (best < 0 || logits[i] > logits[static_cast<size_t>(best)])) best = id;
    }
    return best;
}

bool any_allowed(const TokenMask& mask) {
    for (uint64_t w : mask)
        if (w) return true;
    return false;
}

}  // namespace

int32_t sample_constrained(Sampler& sampler, GrammarMatcher& matcher, std::span<float> logits) {
    sampler.apply_penalties(logits);
    const bool greedy = sampler.params().greedy();
    std::vector<float> probs;
    int32_t pick;
    if (greedy) {
        pick = argmax(logits);
    } else {
        sampler.probabilities(logits, probs);
        pick = sample_index(probs, sampler.uniform());
    }
    if (matcher.accepts_token(pick)) return pick;

    TokenMask mask;
    matcher.fill_mask(mask);
    if (!any_allowed(mask)) fail("grammar: no token of the vocabulary can continue the text");
    if (greedy) return masked_argmax(logits, mask);
    double kept = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (!mask_allows(mask, static_cast<int32_t>(i))) probs[i] = 0.0f;
        kept += probs[i];
    }
    if (kept > 0) {
        for (float& p : probs) p = static_cast<float>(p / kept);
    } else {
        for (size_t i = 0; i < logits.size(); ++i)
            if (!mask_allows(mask, static_cast<int32_t>(i))) logits[i] = -std::numeric_limits<float>::infinity();
        sampler.probabilities(logits, probs);
    }
    return sample_index(probs, sampler.uniform(0, kRetryStream));
}

}  // namespace strata
