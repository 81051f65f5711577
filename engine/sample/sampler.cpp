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
#include "engine/sample/softmax.h"

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
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) return probabilities_top_k(logits, probs);
    probs.resize(n);
    if (n == 0) return;
    // Over the whole vocabulary (no top-k, the OpenAI default): e_i = exp((l_i - max) / t)
    // in SIMD float math (softmax.h), their sum in a fixed order, and the truncations as
    // thresholds on e_i; a sort only for top-p, and only of the candidates that hold the
    // nucleus (the old sort of every id and a double exp each took ~4 ms at 150k tokens).
    const float mx = max_value(logits);
    thread_local std::vector<float> e;  // kept between draws: a vocabulary's worth (no page faults)
    e.resize(n);
    if (mx == std::numeric_limits<float>::infinity()) {  // the +inf logits share the mass
        for (size_t i = 0; i < n; ++i) e[i] = logits[i] == mx ? 1.0f : 0.0f;
    } else if (mx == -std::numeric_limits<float>::infinity()) {  // nothing but -inf and NaN
        e.assign(n, 0.0f);
        e[static_cast<size_t>(argmax(logits))] = 1.0f;
    } else {
        exp_shifted(logits, mx, p_.temperature > 0 ? p_.temperature : 1.0f, e.data());
    }
    const double total = sum_fixed(e);
    // min-p: the tokens at least min_p times the top one's probability (the top's e is 1).
    float floor = p_.min_p;
    if (p_.top_p < 1.0f) floor = nucleus_floor(e, floor, total * p_.top_p);
    double kept = total;
    if (floor > 0) {
        zero_below(e, floor);
        kept = sum_fixed(e);
    }
    scale_to(e, 1.0 / kept, probs.data());
}

float Sampler::nucleus_floor(std::span<const float> e, float floor, double target) const {
    // The smallest set of the most likely tokens whose mass reaches target: the result is
    // the e of the least likely one taken, and every token at or above it is kept (ties
    // at the edge included, as a threshold must). Most often the nucleus is a few tokens,
    // each far above 1/1024 of the top one's probability: those alone are sorted. Else,
    // since positive floats order as their bits, one pass puts each token's mass into a
    // bucket by its top 12 bits (exponent and 4 mantissa bits); the buckets, from the top,
    // find the one where the mass reaches the target, and only its tokens are sorted.
    thread_local std::vector<float> top;
    size_t n_top = 0;
    const float at = std::max(floor, 1.0f / 1024);
    if (sum_at_least(e, at, &n_top) >= target && n_top <= 4096) {
        top.clear();
        for (float v : e)
            if (v >= at) top.push_back(v);
        std::sort(top.begin(), top.end(), std::greater<>());
        double c = 0;
        for (float v : top) {
            c += v;
            if (c >= target) return v;
        }
        return top.back();  // rounding: their sum in another order reached it
    }
    constexpr int kShift = 19, kBuckets = 1 << (31 - kShift);
    thread_local std::vector<double> mass;
    mass.assign(kBuckets, 0.0);
    const auto key = [](float v) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        return bits >> kShift;
    };
    for (float v : e)
        if (v > 0 && v >= floor) mass[key(v)] += v;
    double cum = 0;
    int edge = kBuckets - 1;
    for (; edge >= 0; --edge) {
        if (cum + mass[static_cast<size_t>(edge)] >= target) break;
        cum += mass[static_cast<size_t>(edge)];
    }
    if (edge < 0) return floor;  // every token at or above the floor is short of the target
    thread_local std::vector<float> in_edge;
    in_edge.clear();
    for (float v : e)
        if (v > 0 && v >= floor && key(v) == static_cast<uint32_t>(edge)) in_edge.push_back(v);
    std::sort(in_edge.begin(), in_edge.end(), std::greater<>());
    for (float v : in_edge) {
        cum += v;
        if (cum >= target) return v;
    }
    return in_edge.back();  // rounding: the bucket's own sum reached it, its tokens one by one not
}

void Sampler::probabilities_top_k(std::span<const float> logits, std::vector<float>& probs) const {
    const size_t n = logits.size();
    probs.assign(n, 0.0f);
    std::vector<int32_t> idx;
    top_k_ids(logits, static_cast<size_t>(p_.top_k), idx);
    if (idx.empty()) idx.push_back(0);  // every logit NaN: nothing to rank
    size_t keep = idx.size();
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
    thread_local std::vector<float> probs;  // a vocabulary's worth, kept between draws
    probabilities(logits, probs);
    // One uniform against the cumulative distribution in id order: reproducible.
    return sample_index(probs, uniform());
}

int32_t sample_index(std::span<const float> p, double u) {
    // The cumulative sum in id order, a block of 16 at a time: a block's mass (in double,
    // in a fixed order) is added whole while u lies past it, and only the block u falls in
    // is walked id by id; the chain of dependent adds is 16 times shorter than a scan's.
    constexpr size_t kBlock = 16;
    double cum = 0;
    int32_t last = 0;  // the last id with mass seen
    size_t i = 0;
    for (; i + kBlock <= p.size(); i += kBlock) {
        const double mass = sum_fixed(p.subspan(i, kBlock));
        if (!(mass > 0)) continue;
        if (u < cum + mass) break;
        cum += mass;
        for (size_t j = i + kBlock; j-- > i;)
            if (p[j] > 0) {
                last = static_cast<int32_t>(j);
                break;
            }
    }
    for (; i < p.size(); ++i) {
        if (!(p[i] > 0)) continue;
        last = static_cast<int32_t>(i);
        cum += p[i];
        if (u < cum) return last;
    }
    return last;  // rounding left u just above the total: the last token with mass
}

}  // namespace strata
