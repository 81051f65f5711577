// Stage-level control of a two-stage split, for the pipelined verify windows
// (engine/speculative/pipeline.*, docs/spec.md). Runner::eval runs a whole window through
// every stage; this interface lets the caller queue each stage's half separately, so
// stage 0 can work on window K+1 while stage 1 still verifies window K.
//
// Ops are queued with submit(stage, op) and run on that stage's device thread in
// submission order. The primitives below (forward, snapshot, restore, mtp_here) must be
// called from inside an op on the stage they name. The host waits with wait(), which
// enforces the watchdog and rethrows an op's error.
//
// Two buffer sets ("verifiers") per stage: activations, the hand-off to stage 1 and
// stage 1's output rows. Window K uses set K % 2, so the window in flight on stage 0
// never overwrites what stage 1 is reading. Two snapshot slots per stage and sequence.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>

#include "engine/backend/device.h"

namespace strata {

class StagePipe {
public:
    virtual ~StagePipe() = default;

    static constexpr int kBuffers = 2;   // buffer sets per stage
    static constexpr int kSnapSlots = 2;  // snapshot slots per stage and sequence
    // Rows of one pipelined window at most (a verify window is 1 + drafts, drafts <= 16).
    static constexpr int64_t kMaxRows = 17;

    enum class Mode {
        Verify,  // stage 0: embed, layers, publish to stage 1; stage 1: wait, layers, logits + hiddens
        Replay,  // rebuild state only. Stage 0: embed + layers, no publish. Stage 1: the first T rows
                 // of the buffer set's hand-off payload (stage 0's output for the same tokens in the
                 // window that was verified) through its layers, no head
    };

    virtual DeviceEvent submit(size_t stage, std::function<void()> op) = 0;
    // op on `stage` as its queue's next item, on the calling thread once the queue is
    // idle, returning when it is done (rethrowing its error; the watchdog bounds it):
    // for work the host would submit and then only wait for, which then costs no
    // wake-up of the queue's thread (SplitRunnerImpl::run_on).
    virtual void run(size_t stage, const std::function<void()>& op) = 0;
    // Queues on `stage` a wait for ev (recorded on the other stage): the ops queued after
    // it start once ev is done (Device::wait_event), whatever ev's outcome.
    virtual void wait_event(size_t stage, const DeviceEvent& ev) = 0;
    // Host side: waits for ev (the watchdog bounds it; a restart throws EngineRestarted),
    // then rethrows the error of a failed op.
    virtual void wait(const DeviceEvent& ev, size_t stage) = 0;

    // --- inside an op on `stage` ---
    // tokens at positions pos0.. of seq through this stage's layers, buffer set `buf`,
    // hand-off sequence number `window` (> 0, increasing; used by Verify). Stage 0 checks
    // `cancel` (may be null) before each layer: when set it returns false at once, having
    // published nothing (the stage's state is then past pos0 and must be restored).
    // Stage 1 in Verify mode throws HandoffError when its wait fails. Returns true when done.
    virtual bool forward(size_t stage, int seq, std::span<const int32_t> tokens, int64_t pos0, int buf,
                         uint64_t window, Mode mode, const std::atomic<bool>* cancel) = 0;
    // rows > 0: the snapshot is for a window of that many rows, whose Gated DeltaNet inputs
    // the stage then keeps for rollback() (engine/state/gdn_log.h). restore() forgets them.
    virtual void snapshot(size_t stage, int seq, int slot, int64_t rows = 0) = 0;
    virtual void restore(size_t stage, int seq, int slot) = 0;
    // Back to snapshot `slot` and on through the first n rows of the window it was taken
    // for, from the inputs that window kept (Runner::rollback), when the stage still holds
    // them all: the latest snapshot was this slot's, the window ran whole, no layer of the
    // stage is streamed. Returns false, changing nothing, otherwise (the caller restores
    // and replays).
    virtual bool rollback(size_t stage, int seq, int slot, int64_t n) = 0;
    // Model::mtp_forward on the last stage (same contract as Runner::mtp).
    virtual void mtp_here(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                          float* hidden_out, int64_t draft_rows) = 0;

    // --- host side, with the stages idle for seq ---
    // The output rows of buffer set `buf` after a Verify on the last stage: [rows, n_vocab]
    // logits (the host may edit them in place: the acceptance applies the penalties) and
    // [rows, n_embd] post-norm hiddens, valid until the set is used again.
    virtual float* logits(int buf) = 0;
    virtual const float* hidden(int buf) const = 0;
    // Every stage of seq now holds exactly n positions (after a commit).
    virtual void set_n_past(int seq, int64_t n) = 0;
    // After a failure: abort() releases every hand-off wait (so no op spins on a window
    // that will never be published); once the host has waited for the stages, reset()
    // brings the hand-offs back to their initial state.
    virtual void abort() = 0;
    virtual void reset() = 0;
    // A hand-off sequence number for a new window.
    virtual uint64_t next_window() = 0;
    // The memory of the second buffer set, per stage (reported at start).
    virtual size_t second_set_bytes() const = 0;
};

}  // namespace strata
