// One slot of the scheduler: a Runner sequence and the request decoding in it.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/run/runner.h"
#include "engine/serve/request.h"
#include "engine/text/tokenizer.h"
#include "engine/sample/grammar_matcher.h"
#include "engine/sample/sampler.h"
#include "engine/serve/stop_strings.h"
#include "engine/speculative/speculative.h"
#include "engine/speculative/speculator.h"
#include "engine/text/detokenizer.h"

namespace strata {

struct Slot {
    using clock = std::chrono::steady_clock;
    int seq = -1;  // the Runner sequence, kept for the engine's lifetime
    std::shared_ptr<RequestStream> stream;  // null: the slot is free
    Request req;
    size_t prompt_done = 0;  // prompt tokens already in the sequence
    // The tokens the sequence's state holds (this request's prompt and fed tokens; when
    // free, what the last request left), for the next request to reuse a prefix of.
    std::vector<int32_t> cached;
    size_t reused = 0;       // prompt tokens this request took from the cache
    // Hybrid models: the recurrent state was saved (Runner::snapshot) when the last prompt
    // was read, at this position (0: none). A next turn that shares that prompt but not
    // the answer after it (a thinking model's history drops the reasoning) starts there.
    size_t checkpoint = 0;
    uint64_t last_used = 0;  // when the slot last took a request (least recently used goes first)
    int32_t last = -1;       // the token to feed next (decode phase)
    int64_t n_gen = 0;
    std::optional<Sampler> sampler;
    std::optional<GrammarMatcher> matcher;  // the request's grammar, when it has one
    std::optional<StreamingDetokenizer> detok;
    std::optional<StopMatcher> stops;
    std::vector<TokenLogprob> pending_lp;  // logprobs of tokens whose text is held back
    // Speculative decoding of this request (null: plain): serial, or pipelined on a
    // two-stage split started with --pipeline-windows 2. It refers to *sampler, so it
    // goes before the sampler is replaced.
    std::unique_ptr<Speculator> spec;
    bool pipelined = false;
    // A pipelined step may leave ops on the stages and a window run ahead: finish()
    // before the runner serves anything else.
    bool spec_open = false;
    std::optional<SpecPolicy> policy;  // with spec: K per round, and the default's probes and pauses
    std::optional<int32_t> probe_guess;  // the drafter's guess for this plain window's token (a probe)
    // The MTP catch-up (docs/server.md "Prompt cache"): the MTP's KV holds the pairs of
    // the sequence below mtp_from; prompt_hidden holds the hidden rows of the positions
    // from mtp_base on (spec, prompt phase).
    std::vector<float> prompt_hidden;
    int64_t mtp_base = 0, mtp_from = 0;
    // When free: the hidden row of the last position the sequence holds (`cached`), every
    // pair below it in the MTP's KV (empty: not so, or unknown).
    std::vector<float> end_row;
    std::vector<float> hidden_row;     // [n_embd] hidden row of the token fed in a plain window (spec)
    clock::time_point submitted, started, first_token;

    bool busy() const { return stream != nullptr; }
    bool in_prompt() const { return prompt_done < req.prompt.size(); }
};

// Seconds from a to b.
inline double seconds_between(Slot::clock::time_point a, Slot::clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// Log-probabilities of `chosen` and the top `n_top` tokens from logits (softmax at
// temperature 1).
TokenLogprob token_logprob(const Tokenizer& tok, std::span<const float> logits, int32_t chosen, int n_top);

}  // namespace strata
