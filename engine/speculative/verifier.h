// The Verifier (DESIGN "Speculative decoding"), shared by the serial and the pipelined
// decoder: run() evaluates a verify window [last, d_1..d_k] at positions pos0..pos0 + k
// on its target, after a snapshot of the target's state when k > 0; commit(m) keeps the
// first m drafts: when m < k it rolls the target back to the state after [last, d_1..d_m]
// (VerifyTarget::rollback, from the window's kept recurrent inputs) or, where the target
// cannot, restores that snapshot and replays them (bit-identical to decoding them one by
// one, since every kernel is batch-invariant).
//
// The target is where the steps run: the whole runner for serial speculative decoding
// (RunnerTarget), or one stage of a stage pipe on one of its two buffer sets for the
// pipelined decoder (one Verifier per stage; the steps are then queued on the stage).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/run/runner.h"

namespace strata {

class VerifyTarget {
public:
    virtual ~VerifyTarget() = default;
    // Keep the state from before a window of `rows` rows (the next run()).
    virtual void snapshot(int64_t rows) = 0;
    virtual void restore() = 0;  // back to it
    // Back to it and on through the window's first rows, `kept` at positions pos0..,
    // without running them again (Runner::rollback); false, changing nothing, where the
    // target cannot. A target may also return true having queued the restore and replay
    // itself, when only its device can tell which one applies.
    virtual bool rollback(std::span<const int32_t> /*kept*/, int64_t /*pos0*/) { return false; }
    // tokens at positions pos0..: verify = with every row's output (logits and hidden
    // rows, where the target has an output), else only rebuilding the state (a replay).
    virtual void run(std::span<const int32_t> tokens, int64_t pos0, bool verify) = 0;
};

class Verifier {
public:
    explicit Verifier(VerifyTarget& target) : target_(target) {}

    void run(std::span<const int32_t> window, int64_t pos0);
    // The target already ran this window after its snapshot (a pipelined window started
    // early); commit() treats it as run() would have.
    void adopt(std::span<const int32_t> window, int64_t pos0);
    // Keep [last, d_1..d_m] (m <= k). Returns whether it rolled back (m < k).
    bool commit(int64_t m);

    int64_t pos0() const { return pos0_; }  // the window's first position
    std::span<const int32_t> window() const { return window_; }

private:
    VerifyTarget& target_;
    int64_t pos0_ = 0;
    std::vector<int32_t> window_;
};

// The whole runner as a Verifier's target (serial speculative decoding): a window is one
// Runner::eval with the logits and hidden rows of every row, kept here.
class RunnerTarget final : public VerifyTarget {
public:
    RunnerTarget(Runner& runner, int seq) : runner_(runner), seq_(seq) {}

    void snapshot(int64_t rows) override { runner_.snapshot(seq_, rows); }
    void restore() override { runner_.restore(seq_); }
    bool rollback(std::span<const int32_t> kept, int64_t) override {
        return runner_.rollback(seq_, static_cast<int64_t>(kept.size()));
    }
    void run(std::span<const int32_t> tokens, int64_t pos0, bool verify) override;

    // Of the last verify window: [n_vocab] of row `row` (the acceptance edits it in
    // place), and the hidden rows [rows, n_embd].
    std::span<float> logits(int64_t row);
    std::span<const float> logits(int64_t row) const;
    const float* hidden() const { return hidden_.data(); }
    // The widest window it will run: the buffers are allocated and written here, not in
    // the first window of each width, where the page faults of a few MiB cost as much as
    // the window (a window wider than this still grows them).
    void reserve(int64_t rows);

private:
    Runner& runner_;
    int seq_;
    std::vector<float> logits_, hidden_;  // [cap_rows_, n_vocab], [cap_rows_, n_embd]
    int64_t rows_ = 0, cap_rows_ = 0;     // the last window's rows; the rows the buffers hold
};

}  // namespace strata
