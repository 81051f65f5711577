#include "engine/speculative/accept.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/sample/constrained.h"

namespace strata {


SlotOutcome verify_slot(std::span<const float> p, std::span<const float> q, int32_t draft, std::mt19937_64& rng) {
    STRATA_CHECK(draft >= 0 && static_cast<size_t>(draft) < p.size(), "draft token {} outside the vocabulary", draft);
    STRATA_CHECK(q.empty() || q.size() == p.size(), "draft distribution has {} entries, target {}", q.size(), p.size());
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    const double pd = p[static_cast<size_t>(draft)];
    const double qd = q.empty() ? 1.0 : q[static_cast<size_t>(draft)];
    // qd == 0 cannot happen for a token drawn from q; treat it as a rejection.
    if (qd > 0 && uni(rng) < std::min(1.0, pd / qd)) return {true, draft};
    // Residual r = max(0, p - q), sampled without materializing it normalized: draw
    // u * sum(r) against its cumulative sum.
    const size_t d = static_cast<size_t>(draft);
    auto resid = [&](size_t i) {
        const double qi = q.empty() ? (i == d ? 1.0 : 0.0) : static_cast<double>(q[i]);
        return std::max(0.0, static_cast<double>(p[i]) - qi);
    };
    double total = 0;
    for (size_t i = 0; i < p.size(); ++i) total += resid(i);
    if (!(total > 0)) return {false, sample_index(p, uni(rng))};  // p == q up to rounding: any p draw is exact
    const double u = uni(rng) * total;
    double cum = 0;
    int32_t last = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        const double r = resid(i);
        if (r <= 0) continue;
        last = static_cast<int32_t>(i);
        cum += r;
        if (u < cum) return {false, last};
    }
    return {false, last};
}

WindowOutcome verify_window(const Sampler& sampler, float* logits, int64_t n_vocab, std::span<const int32_t> drafts,
                            std::vector<float>& probs, GrammarMatcher* matcher) {
    const int64_t kd = static_cast<int64_t>(drafts.size());
    for (int64_t i = 0; i <= kd; ++i) {
        std::span<float> row(logits + i * n_vocab, static_cast<size_t>(n_vocab));
        sampler.apply_penalties(row);
        int32_t t;
        if (matcher) {
            t = pick_constrained(sampler, *matcher, row, i);
            if (i == kd || t != drafts[static_cast<size_t>(i)] || matcher->vocab().kind(t) == TokenVocab::Kind::Eog)
                return {i, t};
            matcher->accept_token(t);
            continue;
        }
        if (sampler.params().greedy()) {
            t = argmax(row);
        } else {
            sampler.probabilities(row, probs);
            t = sample_index(probs, sampler.uniform(i));
        }
        if (i == kd || t != drafts[static_cast<size_t>(i)]) return {i, t};
    }
    return {kd, 0};  // not reached: the bonus row always returns
}

}  // namespace strata
