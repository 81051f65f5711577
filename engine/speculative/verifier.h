// The Verifier of serial speculative decoding (DESIGN "Speculative decoding"): run()
// evaluates a verify window [last, d_1..d_k] through every stage of the runner with the
// logits and hidden rows of all k + 1 positions; commit(m) keeps the first m drafts and
// brings the sequence's state to the last kept position (snapshot before the window,
// restore and replay of the kept tokens when a draft was rejected: bit-identical to
// decoding them one by one, since every kernel is batch-invariant).
//
// The pipelined loop (engine/speculative/pipeline.*) runs the same two steps per stage through
// a StagePipe: launch = StagePipe::submit, poll = DeviceEvent::done, on two buffer sets
// ("two verifiers per stage").
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/run/runner.h"

namespace strata {

class Verifier {
public:
    Verifier(Runner& runner, int seq);

    // The window at positions n_past..n_past + k. After it the state holds the whole
    // window; logits() and hidden() give its rows until the next run().
    void run(std::span<const int32_t> window);
    // Keep [last, d_1..d_m] (m <= k). Returns whether it rolled back (m < k).
    bool commit(int64_t m);

    std::span<float> logits(int64_t row);  // [n_vocab] of window row `row` (the acceptance edits it in place)
    std::span<const float> logits(int64_t row) const;
    const float* hidden() const { return hidden_.data(); }  // [k + 1, n_embd]
    int64_t n0() const { return n0_; }              // the window's first position

private:
    Runner& runner_;
    int seq_;
    int64_t n0_ = 0;
    std::vector<int32_t> window_;
    std::vector<float> logits_, hidden_;
};

}  // namespace strata
