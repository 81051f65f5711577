#include "engine/spec/mtp_drafter.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/sample/sampler.h"

namespace strata {

MtpDrafter::MtpDrafter(Runner& runner, int seq, float min_p, int64_t chunk)
    : runner_(runner), seq_(seq), min_p_(min_p), chunk_(chunk) {
    STRATA_CHECK(runner.has_mtp(), "speculative decoding needs a model with an MTP head");
    STRATA_CHECK(chunk > 0, "MTP chunk must be positive");
    logits_.resize(static_cast<size_t>(runner.model().hp().n_vocab));
}

namespace {
// softmax(logits)[id] at temperature 1, in double.
float probability(const std::vector<float>& logits, int32_t id) {
    const double top = logits[static_cast<size_t>(id)];
    double sum = 0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - top);
    return static_cast<float>(1.0 / sum);
}
}  // namespace

void MtpDrafter::draft(const float* hidden, const int32_t* next_tokens, int64_t T, int64_t pos0, int k, Draft& out) {
    STRATA_CHECK(T > 0, "draft: no committed pairs to feed");
    const int64_t E = runner_.model().hp().n_embd;
    out.tokens.clear();
    out.probs.clear();
    // Catch-up: the committed pairs in chunks; only the last chunk's last row matters
    // for the chain (its logits give d_1, its hidden feeds step 2).
    for (int64_t c0 = 0; c0 < T; c0 += chunk_) {
        const int64_t n = std::min(chunk_, T - c0);
        const bool last = c0 + n == T;
        if (last) hid_.resize(static_cast<size_t>(n * E));
        runner_.mtp(seq_, hidden + c0 * E, next_tokens + c0, n, pos0 + c0, last && k > 0 ? logits_.data() : nullptr,
                    last && k > 1 ? hid_.data() : nullptr);
    }
    if (k <= 0) return;
    const float* h = hid_.data() + (static_cast<int64_t>(hid_.size()) / E - 1) * E;  // last row
    hid_next_.resize(static_cast<size_t>(E));
    int64_t pos = pos0 + T;
    for (int i = 0; i < k; ++i) {
        const int32_t d = argmax(logits_);
        const float pd = probability(logits_, d);
        if (pd < min_p_) break;  // unsure: a short window costs less than a likely rejection
        out.tokens.push_back(d);
        out.probs.push_back(pd);
        if (i + 1 == k) break;
        runner_.mtp(seq_, h, &d, 1, pos++, logits_.data(), hid_next_.data());
        std::swap(hid_, hid_next_);
        h = hid_.data();
        hid_next_.resize(static_cast<size_t>(E));
    }
}

}  // namespace strata
