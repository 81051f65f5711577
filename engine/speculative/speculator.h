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
    // the MTP's KV already holds the pairs below `from` (fed by the caller, or left by an
    // earlier request on a reused prefix: the scheduler's MTP catch-up keeps those exact
    // where it can, docs/server.md; where it cannot, drafts may differ from a cold
    // start's, the verified tokens do not).
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
    // When the request ends with the sequence as plain decoding leaves it (after finish()):
    // feeds the MTP every pending pair below the sequence's last position and puts that
    // position's hidden row into row, so the state left for the next request holds every
    // pair it can (the pair at the last position waits for the token that follows). False
    // (row untouched) when the decoder does not hold that row.
    virtual bool settle(std::vector<float>& row) = 0;
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
