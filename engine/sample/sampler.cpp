#include "engine/sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

float max_value(std::span<const float> x) {
    // m < v ? v : m, which skips NaNs as a plain scan does. On x86 (SSE2 is every x86-64's
    // baseline) four vectors of _mm_max_ps(v, m), which is that rule; the compiler does not
    // vectorize the scalar form by itself (it would have to assume no NaNs).
    float best = -std::numeric_limits<float>::infinity();
    size_t i = 0;
#if defined(__SSE2__)
    if (x.size() >= 16) {
        __m128 m0 = _mm_set1_ps(best), m1 = m0, m2 = m0, m3 = m0;
        for (; i + 16 <= x.size(); i += 16) {
            m0 = _mm_max_ps(_mm_loadu_ps(x.data() + i), m0);
            m1 = _mm_max_ps(_mm_loadu_ps(x.data() + i + 4), m1);
            m2 = _mm_max_ps(_mm_loadu_ps(x.data() + i + 8), m2);
            m3 = _mm_max_ps(_mm_loadu_ps(x.data() + i + 12), m3);
        }
        alignas(16) float lanes[16];
        _mm_store_ps(lanes, m0);
        _mm_store_ps(lanes + 4, m1);
        _mm_store_ps(lanes + 8, m2);
        _mm_store_ps(lanes + 12, m3);
        for (float v : lanes) best = best < v ? v : best;
    }
#endif
    for (; i < x.size(); ++i) best = best < x[i] ? x[i] : best;
    return best;
}

int32_t argmax(std::span<const float> logits) {
    // Lowest id wins a tie, so greedy output never depends on scan order. The largest
    // value first, then the first id holding it: two passes the CPU streams through,
    // where one pass comparing against logits[best] waits on a load per element (a 150k
    // vocabulary took 0.6 ms that way).
    if (logits.empty()) return 0;
    const float mx = max_value(logits);
    for (size_t i = 0; i < logits.size(); ++i)
        if (logits[i] == mx) return static_cast<int32_t>(i);
    // No finite or infinite value (every logit NaN): the plain scan's answer.
    return 0;
}

void top_k_ids(std::span<const float> logits, size_t k, std::vector<int32_t>& out) {
    // The k best by (logit descending, id ascending), in that order: one pass over the
    // values, keeping the best k seen in a sorted buffer. Ids come in increasing order, so
    // a newcomer beats the buffer's worst only with a larger logit: a block of 16 whose
    // largest value does not beat it is skipped whole (most of them, once the buffer
    // holds good values), and no index array is sorted.
    out.clear();
    if (k == 0) return;
    std::vector<std::pair<float, int32_t>> best;
    best.reserve(k + 1);
    float worst = -std::numeric_limits<float>::infinity();  // best.back() once full
    auto offer = [&](size_t i) {
        const float x = logits[i];
        if (best.size() == k ? !(x > worst) : x != x) return;  // NaN never enters
        auto at = std::find_if(best.begin(), best.end(), [x](const auto& e) { return e.first < x; });
        best.insert(at, {x, static_cast<int32_t>(i)});
        if (best.size() > k) best.pop_back();
        if (best.size() == k) worst = best.back().first;
    };
    constexpr size_t kBlock = 16;
    size_t i = 0;
    for (; i + kBlock <= logits.size(); i += kBlock) {
        if (best.size() == k && !(max_value(logits.subspan(i, kBlock)) > worst)) continue;
        for (size_t j = i; j < i + kBlock; ++j) offer(j);
    }
    for (; i < logits.size(); ++i) offer(i);
    for (const auto& e : best) out.push_back(e.second);
}

void sort_by_logit(std::span<const float> logits, std::vector<int32_t>& out) {
    // A stable radix sort on the logits' bits mapped to descending order, over ids that
    // start in increasing order: equal logits stay in id order, exactly the order of a
    // comparison sort by (logit descending, id ascending), in four linear passes instead
    // of n log n comparisons through the ids (a 150k vocabulary took ~45 ms per token).
    // Every pass keeps the order of equal digits, so two passes' worth of equal keys stay
    // in id order too.
    const size_t n = logits.size();
    std::vector<uint64_t> a(n), b(n);
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &logits[i], sizeof bits);
        if (bits == 0x80000000u) bits = 0;  // -0 equals +0
        const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
        a[i] = (uint64_t{~ascending} << 32) | static_cast<uint32_t>(i);
    }
    constexpr int kBits = 11, kBuckets = 1 << kBits;  // three passes over the 32 key bits
    std::vector<size_t> count(kBuckets + 1);
    for (int shift = 32; shift < 64; shift += kBits) {
        std::fill(count.begin(), count.end(), 0);
        for (uint64_t k : a) ++count[((k >> shift) & (kBuckets - 1)) + 1];
        for (int d = 0; d < kBuckets; ++d) count[d + 1] += count[d];
        for (uint64_t k : a) b[count[(k >> shift) & (kBuckets - 1)]++] = k;
        a.swap(b);
    }
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(a[i] & 0xFFFFFFFFu);
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

void Sampler::probabilities(std::span<const float> logits, std::vector<float>& probs, std::vector<int32_t>& kept_ids) const {
    probabilities(logits, probs);
    // In id order; without a truncation that is every id, so a scan beats sorting them.
    kept_ids.clear();
    for (size_t i = 0; i < probs.size(); ++i)
        if (probs[i] > 0) kept_ids.push_back(static_cast<int32_t>(i));
}

void Sampler::probabilities(std::span<const float> logits, std::vector<float>& probs) const {
    const size_t n = logits.size();
    probs.assign(n, 0.0f);
    std::vector<int32_t> idx;
    size_t keep = n;
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
        top_k_ids(logits, static_cast<size_t>(p_.top_k), idx);
        if (idx.empty()) idx.push_back(0);  // every logit NaN: nothing to rank
        keep = idx.size();
    } else {
        sort_by_logit(logits, idx);
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
