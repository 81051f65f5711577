// What a caller that mixes speculative rounds with plain steps needs of a speculative
// decoder, serial (SpecDecoder) or pipelined over a two-stage split (PipelinedDecoder):
// the server's scheduler holds one per request and drives it through this interface,
// so a slot decoding alone runs whichever the runner offers.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

struct SpecStats;
struct PipelineStats;

class Speculator {
public:
    virtual ~Speculator() = default;

    // After the prompt pass: hidden rows of the prompt tokens from `from` on, the prompt,
    // and the first token sampled from its logits (emitted, not yet evaluated). from > 0:
    // the sequence already held the first `from` prompt tokens (a prompt cache hit), and
    // the MTP's KV for them is whatever the sequence's earlier request left there (its
    // pairs up to from - 1, where it fed the earlier request's next token): drafts may
    // differ from a cold start's, the verified tokens do not.
    virtual void start(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first, int64_t from) = 0;
    // One round: at most max_emit tokens committed and appended to out; k drafts (0: the
    // decoder's own K).
    virtual void step(int64_t max_emit, std::vector<int32_t>& out, int k) = 0;
    // Before plain steps (advance, guess) or any other use of the runner: the sequence is
    // then exactly as plain decoding leaves it. Nothing to do for the serial decoder; the
    // pipelined one waits for its stages and undoes a window run ahead.
    virtual void finish() = 0;
    // A token committed by a plain step (SpecDecoder::advance).
    virtual void advance(const float* hidden, int32_t next, bool paused) = 0;
    // A shadow probe (SpecDecoder::guess).
    virtual int32_t guess() = 0;
    // The target's logits row of the i-th token the last step() appended (for logprobs),
    // valid until the next step().
    virtual std::span<const float> logits(size_t i) const = 0;
    virtual const SpecStats& stats() const = 0;
    // Pipelined windows' counters into out; false for the serial decoder.
    virtual bool pipeline_stats(PipelineStats& out) const {
        (void)out;
        return false;
    }
};

}  // namespace strata
