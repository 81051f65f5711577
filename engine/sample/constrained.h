// Sampling under a grammar, checking the sampler's own pick first.
//
// sample_constrained applies the penalties, then picks a token exactly as
// Sampler::sample would (same uniform). If the grammar accepts that token, it is the
// answer: the common case costs one accepts_token, not a mask over the vocabulary, and
// the output equals unconstrained sampling wherever the model already follows the
// grammar. Only on a refusal is the full mask computed and the token drawn again:
//  - greedy: the argmax over allowed tokens (lowest id on ties), exactly;
//  - otherwise: from the sampler's distribution (temperature, top-k/p, min-p) restricted
//    to the allowed tokens, renormalized, with a second uniform of the same position
//    (Sampler::uniform(0, 1)). This is rejection sampling, so the result follows the
//    restricted distribution exactly: an accepted first draw is distributed as the
//    restricted distribution, and a retry is an independent draw from it. (Redrawing
//    with the first uniform instead would skew it towards tokens next to the refused
//    ones in id order.) Seeded results stay reproducible, one position at a time.
//  - if truncation kept no allowed token, the draw is from the truncations applied to
//    the masked logits instead (top-k among allowed tokens, ...).
// The logits are modified in place: the penalties, and in the last case -infinity where
// refused.
// Neither the sampler nor the matcher advances: the caller accepts the token into both.
// Throws strata::Error when no token at all can continue the text.
#pragma once
#include <cstdint>
#include <span>

#include "engine/sample/grammar_matcher.h"
#include "engine/sample/sampler.h"

namespace strata {

int32_t sample_constrained(Sampler& sampler, GrammarMatcher& matcher, std::span<float> logits);
// The same pick on logits whose penalties are already applied, for the position `ahead`
// tokens after the sampler's (its uniforms Sampler::uniform(ahead) and (ahead, 1)): what a
// verify window asks at each of its positions.
int32_t pick_constrained(const Sampler& sampler, GrammarMatcher& matcher, std::span<float> logits, int64_t ahead);

}  // namespace strata
