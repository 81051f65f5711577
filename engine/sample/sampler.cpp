#include "engine/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "engine/core/error.h"

namespace strata {

void SamplingParams::validate() const {
    if (!(temperature >= 0.0f) || temperature > 100.0f) fail("temperature must be in [0, 100], got {}", temperature);
    if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
    if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
    if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
    if (!(repeat_penalty > 0.0f) || repeat_penalty > 100.0f) fail("repeat_penalty must be in (0, 100], got {}", repeat_penalty);
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
    if (penalty_last_n < -1) fail("penalty_last_n must be >= -1, got {}", penalty_last_n);
}

Sampler::Sampler(SamplingParams p) : p_(p) { p_.validate(); }

double Sampler::uniform(int64_t ahead, uint64_t stream) const {
    // splitmix64 of (seed, position, stream): a counter-based generator, so any
    // position's draw can be made in any order. Stream 0 is the historical one.
    uint64_t z = p_.seed ^ ((n_seen_ + static_cast<uint64_t>(ahead) + 1) * 0x9E3779B97F4A7C15ull) ^
                 (stream * 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t argmax(std::span<const float> logits) {
    // Lowest id wins a tie, so greedy output never depends on scan order.
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    return best;
}

void Sampler::accept(int32_t token) {
    ++n_seen_;
    if (p_.penalty_last_n == 0) return;
    recent_.push_back(token);
    if (p_.penalty_last_n > 0)
        while (recent_.size() > static_cast<size_t>(p_.penalty_last_n)) recent_.pop_front();
}

void Sampler::apply_penalties(std::span<float> logits) const {
    if (!p_.has_penalties() || recent_.empty()) return;
    std::unordered_map<int32_t, int> count;
    for (int32_t t : recent_) ++count[t];
    for (const auto& [tok, n] : count) {
        if (tok < 0 || static_cast<size_t>(tok) >= logits.size()) continue;
        float& l = logits[static_cast<size_t>(tok)];
        if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
        l -= static_cast<float>(n) * p_.frequency_penalty + p_.presence_penalty;
    }
}

void Sampler::probabilities(std::span<const float> logits, std::vector<float>& probs) const {
    const size_t n = logits.size();
    probs.assign(n, 0.0f);
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    // Sort by logit, ties by id: the kept set never depends on sort stability.
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    size_t keep = n;
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
        keep = static_cast<size_t>(p_.top_k);
        std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(keep), idx.end(), by_logit);
    } else {
        std::sort(idx.begin(), idx.end(), by_logit);
    }
    const float t = p_.temperature > 0 ? p_.temperature : 1.0f;
    const float mx = logits[idx[0]];
    std::vector<double> p(keep);
    double sum = 0;
    for (size_t i = 0; i < keep; ++i) sum += (p[i] = std::exp((logits[idx[i]] - mx) / t));
    for (auto& v : p) v /= sum;
    if (p_.min_p > 0) {  // drop tokens below min_p times the top probability
        size_t k = 1;
        while (k < keep && p[k] >= p_.min_p * p[0]) ++k;
        keep = k;
    }
    if (p_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
        double cum = 0;
        size_t k = 0;
        while (k < keep) {
            cum += p[k++];
            if (cum >= p_.top_p) break;
        }
        keep = k;
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += p[i];
    for (size_t i = 0; i < keep; ++i) probs[static_cast<size_t>(idx[i])] = static_cast<float>(p[i] / kept);
}

int32_t Sampler::sample(std::span<float> logits) {
    apply_penalties(logits);
    if (p_.greedy()) return argmax(logits);
    std::vector<float> probs;
    probabilities(logits, probs);
    // One uniform against the cumulative distribution in id order: reproducible.
    return sample_index(probs, uniform());
}

int32_t sample_index(std::span<const float> p, double u) {
    double cum = 0;
    int32_t last = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0) continue;
        last = static_cast<int32_t>(i);
        cum += p[i];
        if (u < cum) return last;
    }
    return last;  // rounding left u just above the total: the last token with mass
}

}  // namespace strata
