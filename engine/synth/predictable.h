// Predictable qwen3next models (`make-model --mtp-agree A`): random weights like any
// synthetic model, except that greedy decoding follows a fixed permutation f of the
// ordinary tokens (t -> f(t), one cycle through all of them), and the MTP head
// predicts f on a chosen fraction A of the tokens and something else on the rest. So
// speculative decoding sees a known acceptance rate: each draft is accepted with
// probability about A given the drafts before it were (docs/make-model.md).
//
// How (all layers keep their ordinary random weights and do their full work):
// - token_embd rows are random with RMS kEmbedScale, far above the ~1 that all the
//   layers add to the residual stream together, so the final hidden is nearly
//   norm(e_t): the current token's own embedding;
// - output row f(t) is that normalized embedding (unit-RMS rows / sqrt(n_embd), the
//   scale of an ordinary head), so the logit of f(t) is about sqrt(n_embd) (16 for
//   tiny) and every other logit about N(0, 1);
// - the MTP block: the embedding half of nextn.eh_proj is random with a large scale
//   too, so the MTP stream is nearly W_e enorm(e_u) for its input token u, and its own
//   head (nextn.shared_head_head) maps that to g(u) = f(sigma(u)), where sigma
//   deranges a random set B of (1 - A) of the tokens and fixes the others.
// The head rows are computed from the dequantized stored weights, so every weight
// type keeps the property (tests run the model to check it).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/synth/model_writer.h"

namespace strata::synth {

// RMS of the embedding rows and of the MTP's embedding projection: the signal the
// ~unit-RMS layer outputs are added to (their ratio bounds the hidden's deviation).
inline constexpr double kEmbedScale = 32.0;

struct PredictableMap {
    std::vector<int32_t> cycle;     // the ordinary (NORMAL) tokens in orbit order
    std::vector<int32_t> next;      // [n_vocab] f: greedy token after t; -1 for special/reserved t
    std::vector<int32_t> mtp_next;  // [n_vocab] g: the MTP's draft after t (= next[t] unless t in B); -1 likewise
    int64_t n_disagree = 0;         // |B|: cycle tokens with mtp_next != next
};

// The maps of the predictable model with config c (c.mtp_agree set) and this seed.
PredictableMap predictable_map(const ModelConfig& c, uint64_t seed);

// Fill m's Init::Derived tensors (token_embd, output, nextn.eh_proj,
// nextn.shared_head_head) from the maps; every other tensor must be generated already
// (the norms are read back). Deterministic in (config, seed) for any thread count.
void make_predictable(SynthModel& m, uint64_t seed, int threads);

}  // namespace strata::synth
