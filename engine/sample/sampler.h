// Token sampling: logit processors (penalties), then greedy or a seeded draw after
// temperature, top-k, top-p and min-p. Same seed, same logits -> same tokens.
//
// The draw for the token at sequence position n is one uniform that depends on the
// seed and n alone (counter-based, not a stream): however the token is produced (a
// plain step, alone or batched with other requests, or a speculative verify window
// that checks several positions at once), the same position gets the same uniform, so
// a seeded request gives the same tokens whatever runs beside it.
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace strata {

struct SamplingParams {
    float temperature = 0.0f;      // <= 0: greedy
    int32_t top_k = 0;             // 0: off
    float top_p = 1.0f;            // 1: off
    float min_p = 0.0f;            // 0: off
    float repeat_penalty = 1.0f;   // 1: off (llama.cpp style: divide positive logits, multiply negative)
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int32_t penalty_last_n = 64;   // window of recent tokens the penalties look at; -1 = whole context
    uint64_t seed = 0;

    bool greedy() const { return temperature <= 0.0f; }
    bool has_penalties() const {
        return repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
    }
    void validate() const;  // throws strata::Error naming the bad field
};

class Sampler {
public:
    explicit Sampler(SamplingParams p);

    // Applies the penalties in place (the distribution speculative decoding must match).
    void apply_penalties(std::span<float> logits) const;
    // Penalties, then choose a token.
    int32_t sample(std::span<float> logits);
    // Records an emitted (or prompt) token for the penalties; the next draw is for the
    // position after it.
    void accept(int32_t token);
    // The uniform in [0, 1) of the token `ahead` positions after the next one (0: the
    // next token, which sample() draws with). Other streams give further uniforms of the
    // same position, independent of stream 0 (a constrained draw's retry uses stream 1).
    double uniform(int64_t ahead = 0, uint64_t stream = 0) const;

    // Probabilities after penalties, temperature and the truncations (top-k/p, min-p):
    // the distribution sample() draws from; zeros outside the kept set.
    void probabilities(std::span<const float> logits, std::vector<float>& probs) const;
    // The same, and the ids left with mass > 0, in increasing order: what a caller that
    // edits the distribution needs to visit (a top-k's few, instead of the vocabulary).
    void probabilities(std::span<const float> logits, std::vector<float>& probs, std::vector<int32_t>& kept) const;

    const SamplingParams& params() const { return p_; }

private:
    void probabilities_top_k(std::span<const float> logits, std::vector<float>& probs) const;
    // top-p over the whole vocabulary: the e (exp of the shifted logit) of the nucleus's
    // least likely token, the tokens at or above min-p's floor reaching target mass.
    float nucleus_floor(std::span<const float> e, float floor, double target) const;

    SamplingParams p_;
    uint64_t n_seen_ = 0;  // tokens accepted: the position of the next one
    std::deque<int32_t> recent_;
};

int32_t argmax(std::span<const float> logits);
// The largest value of x (-infinity when empty; NaNs are skipped).
float max_value(std::span<const float> x);
// The ids of the k largest logits (ties: the lower id first), largest first; NaNs are skipped.
void top_k_ids(std::span<const float> logits, size_t k, std::vector<int32_t>& out);

// A draw from p by one uniform u in [0, 1) against the cumulative sum in id order, as
// Sampler::sample draws (reproducible for a seed; the speculative acceptance uses it too).
int32_t sample_index(std::span<const float> p, double u);

}  // namespace strata
