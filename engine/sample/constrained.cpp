#include "engine/sample/constrained.h"

#include <limits>
#include <vector>

#include "engine/core/error.h"

namespace strata {

namespace {

constexpr uint64_t kRetryStream = 1;
constexpr size_t kTopFirst = 16;  // candidates checked before a masked scan (greedy)

int32_t masked_argmax(std::span<const float> logits, const TokenMask& mask) {
    // As argmax: the largest allowed value, then the first allowed id holding it. Whole
    // 64-token words go through the vector max (inside a string nearly every word is).
    float mx = -std::numeric_limits<float>::infinity();
    bool any = false;
    const size_t n = logits.size();
    for (size_t w = 0; w < mask.size() && w * 64 < n; ++w) {
        uint64_t bits = mask[w];
        if (!bits) continue;
        any = true;
        const size_t base = w * 64;
        if (bits == ~0ull && base + 64 <= n) {
            const float m = max_value(logits.subspan(base, 64));
            mx = mx < m ? m : mx;
            continue;
        }
        for (; bits; bits &= bits - 1) {
            const size_t i = base + static_cast<size_t>(__builtin_ctzll(bits));
            if (i < n) mx = mx < logits[i] ? logits[i] : mx;
        }
    }
    if (!any) return -1;
    for (size_t i = 0; i < n; ++i)  // equal values are few: the mask is asked only there
        if (logits[i] == mx && i / 64 < mask.size() && mask_allows(mask, static_cast<int32_t>(i)))
            return static_cast<int32_t>(i);
    // Every allowed logit NaN: the first allowed id, as a plain scan would give.
    for (size_t w = 0; w < mask.size(); ++w)
        if (mask[w]) return static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(mask[w])));
    return -1;
}

bool any_allowed(const TokenMask& mask) {
    for (uint64_t w : mask)
        if (w) return true;
    return false;
}

}  // namespace

int32_t sample_constrained(Sampler& sampler, GrammarMatcher& matcher, std::span<float> logits) {
    sampler.apply_penalties(logits);
    return pick_constrained(sampler, matcher, logits, 0);
}

int32_t pick_constrained(const Sampler& sampler, GrammarMatcher& matcher, std::span<float> logits, int64_t ahead) {
    const bool greedy = sampler.params().greedy();
    thread_local std::vector<float> probs;  // kept between draws: a vocabulary's worth
    thread_local std::vector<int32_t> kept;  // ids with mass, increasing (sampled only)
    int32_t pick;
    if (greedy) {
        pick = argmax(logits);
    } else {
        sampler.probabilities(logits, probs, kept);
        pick = sample_index(probs, sampler.uniform(ahead));
    }
    if (matcher.accepts_token(pick)) return pick;

    TokenMask mask;
    matcher.fill_mask(mask);
    if (!any_allowed(mask)) fail("grammar: no token of the vocabulary can continue the text");
    if (greedy) {
        // The best allowed token is the first allowed one in (logit descending, id
        // ascending) order. Where the grammar refuses few tokens (inside a string) it is
        // among the model's top few: ask the mask about those before scanning it all.
        std::vector<int32_t> top;
        top_k_ids(logits, kTopFirst, top);
        for (int32_t id : top)
            if (mask_allows(mask, id)) return id;
        return masked_argmax(logits, mask);
    }
    // The draw restricted to the allowed tokens: only the ids with mass change.
    double mass = 0;
    for (int32_t id : kept) {
        float& p = probs[static_cast<size_t>(id)];
        if (!mask_allows(mask, id)) p = 0.0f;
        mass += p;
    }
    if (mass > 0) {
        for (int32_t id : kept) {
            float& p = probs[static_cast<size_t>(id)];
            p = static_cast<float>(p / mass);
        }
    } else {  // the model's whole kept set is refused: truncate again among the allowed
        for (size_t i = 0; i < logits.size(); ++i)
            if (!mask_allows(mask, static_cast<int32_t>(i))) logits[i] = -std::numeric_limits<float>::infinity();
        sampler.probabilities(logits, probs);
    }
    return sample_index(probs, sampler.uniform(ahead, kRetryStream));
}

}  // namespace strata
