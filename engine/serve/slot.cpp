#include "engine/serve/slot.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

TokenLogprob token_logprob(const Tokenizer& tok, std::span<const float> logits, int32_t chosen, int n_top) {
    float mx = logits[0];
    for (float l : logits) mx = std::max(mx, l);
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
    const double lse = static_cast<double>(mx) + std::log(sum);
    TokenLogprob out;
    out.token = chosen;
    out.text = std::string(tok.piece(chosen, true));  // control tokens by name: an empty string says nothing
    out.logprob = static_cast<float>(logits[static_cast<size_t>(chosen)] - lse);
    if (n_top > 0) {
        std::vector<int32_t> idx(logits.size());
        std::iota(idx.begin(), idx.end(), 0);
        const size_t k = std::min(idx.size(), static_cast<size_t>(n_top));
        std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(), [&](int32_t a, int32_t b) {
            return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
        });
        for (size_t i = 0; i < k; ++i)
            out.top.emplace_back(std::string(tok.piece(idx[i], true)), static_cast<float>(logits[idx[i]] - lse));
    }
    return out;
}

}  // namespace strata
