// Pipelined verify windows (--pipeline-windows 2, docs/spec.md "Pipelined windows"):
// speculative decoding of one sequence on a two-stage split where stage 0 starts
// window K+1 while stage 1 still verifies window K.
//
// Window K+1 is guessed from the MTP chain run on through K's drafts, as if K were kept
// whole: its first token is the chain's guess of K's bonus token, its drafts the
// chain's next ones. When K's verdict agrees (all drafts kept, bonus = guess), stage 0's
// half of K+1 is already done. When it does not, stage 0 restores its recurrent state
// from the snapshot taken before, replays K's commit with the real count, and the next
// window is drafted afresh from the real tokens. Greedy output is exactly the serial
// loop's: only verification decides what is emitted, and every kernel is
// batch-invariant.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/core/env.h"
#include "engine/run/runner.h"
#include "engine/sample/sampler.h"
#include "engine/speculative/mtp_drafter.h"
#include "engine/speculative/speculative.h"
#include "engine/split/split_runner.h"

namespace strata {

// Each leaves greedy output unchanged; they change only what runs when. The defaults
// here are the STRATA_PIPELINE_* variables' defaults.
struct PipelineOptions {
    double theta = 0.25;        // STRATA_PIPELINE_THETA: speculate when the chain's estimate is >= theta (> 1: never)
    int force_miss = 0;         // STRATA_PIPELINE_FORCE_MISS: 1 = every early window is treated as wrong; 2 = every other one
    bool doom_skip = true;      // STRATA_PIPELINE_DOOM_SKIP: a wrong early window stops at its next layer
    bool prestage = true;       // STRATA_PIPELINE_PRESTAGE: queue the early window behind the chain on the device
    bool snap_overlap = true;   // STRATA_PIPELINE_SNAP_OVERLAP: snapshots and restores as device ops (else on the host)

    static PipelineOptions from_env(const EnvReader& env);
    static const PipelineOptions& process();  // the process environment's, parsed on first use
    static std::vector<EnvSpec> env_specs();
};

struct PipelineStats {
    int64_t early = 0;        // windows started on stage 0 before the previous verdict
    int64_t hits = 0;         // of those, kept
    int64_t misses = 0;       // rolled back (wrong guess, or forced)
    int64_t forced = 0;       // of the misses, forced by STRATA_PIPELINE_FORCE_MISS
    int64_t below_theta = 0;  // windows not started early: the estimate was below theta
    int64_t cut = 0;          // early windows stopped part-way by the doom skip
    int64_t log_rollbacks = 0;  // stage rollbacks from the window's kept inputs (no replay)
    int64_t replays = 0;        // stage rollbacks by restore and replay
    size_t buffer_bytes = 0;  // the second buffer set, per stage
};

class PipelinedDecoder final : public Speculator {
public:
    // Weight bytes a pipelined window of k drafts reads on the last stage beyond its
    // layers, for --split auto to balance the stages by (docs/spec.md): the LM head once,
    // and the draft chain's MTP steps. After a kept guess the chain feeds the committed
    // pairs, forces the window's k drafts and drafts k + 1: 2k + 2 steps of the MTP block
    // (a main layer's read, layer_bytes), k + 2 of them through the draft vocabulary's rows
    // of the head (draft_rows of n_vocab). The block's steps count as k + 1 reads: the
    // feed and the forced steps re-read what the drafted ones read, mostly from the
    // caches; counted at 2k + 2, the split of two small models was 0.85-0.95x as fast as
    // the best one (docs/benchmarks.md, twenty-sixth session).
    static uint64_t last_stage_bytes(uint64_t head_bytes, uint64_t layer_bytes, int64_t draft_rows, int64_t n_vocab,
                                     int k);

    // stage_pipe_of(runner) must be non-null. Same contract as SpecDecoder otherwise.
    PipelinedDecoder(Runner& runner, int seq, const Sampler& sampler, const SpecOptions& opt,
                     const PipelineOptions& popt);
    ~PipelinedDecoder();  // waits for every op still queued (they point into this object)

    void start(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first, int64_t from = 0) override;
    // One window: at most max_emit tokens appended to out (as SpecDecoder::step; k: drafts
    // of a newly drafted window, 0 = SpecOptions::k).
    void step(int64_t max_emit, std::vector<int32_t>& out, int k = 0) override;
    // After the last step: waits for the stages, undoes an early window still on stage 0
    // and leaves the sequence as plain decoding would (every emitted token but the last
    // evaluated). Speculation may go on after it: plain steps through Runner::eval, each
    // reported with advance(), then step() again (SpecPolicy's pauses).
    void finish() override;
    // A token committed by a plain step after finish() (SpecDecoder::advance; paused:
    // keep only the newest kPausedPairs pairs for the MTP).
    void advance(const float* hidden, int32_t next, bool paused) override;
    // A shadow probe after finish() (SpecDecoder::guess), on the last stage.
    int32_t guess() override;
    bool settle(std::vector<float>& row) override;  // after finish(), on the last stage

    // The target's logits row of the i-th token the last step() appended: row i of the
    // verified window's buffer set, which nothing writes again before the next step()
    // (stage 1's replays run no head).
    std::span<const float> logits(size_t i) const override;

    const SpecStats& stats() const override { return stats_; }
    PipelineStats pipeline_stats() const {
        PipelineStats p = pstats_;
        p.cut = cut_.load();
        p.log_rollbacks = log_rollbacks_.load();
        p.replays = replays_.load();
        return p;
    }
    bool pipeline_stats(PipelineStats& out) const override {
        out = pipeline_stats();
        return true;
    }

private:
    // Windows that drafted a position before its measured rate of being kept caps the
    // estimate of an early window (run_step).
    static constexpr int64_t kMeasuredFrom = 8;

    // The guess for the window after the current one, written by the chain op on stage 1
    // and read by stage 0's op (after the chain's event) and by the host (after stage 1's
    // verify, queued behind the chain). Two, alternating: an early window's op may still
    // run on stage 0 while the next guess is drafted.
    struct Early {
        Draft guess;       // [g, e_1..e_j]: the guessed first token and the drafts after it
        bool go = false;   // the chain's estimate passed theta
        bool launched = false;
        int64_t pos0 = 0;
        int buf = 0;
        int slot = 0;      // stage 0's snapshot slot holding its state from before this window
        uint64_t window = 0;
        std::atomic<bool> cancel{false};
    };

    // Stage `stage` of the pipe as a Verifier's target for the window in flight: run()
    // queues StagePipe::forward on buffer set `buf` with hand-off number `window` (none
    // for a replay); snapshot and restore use the stage's snapshot slot `slot`.
    struct StageTarget final : VerifyTarget {
        StageTarget(PipelinedDecoder& dec, size_t s) : d(dec), stage(s) {}
        void snapshot(int64_t rows) override { d.snapshot(stage, slot, rows); }
        void restore() override { d.restore(stage, slot); }
        bool rollback(std::span<const int32_t> kept, int64_t pos0) override;
        void run(std::span<const int32_t> tokens, int64_t pos0, bool verify) override;
        void set(int b, int sl, uint64_t w) {
            buf = b;
            slot = sl;
            window = w;
        }
        PipelinedDecoder& d;
        size_t stage;
        int buf = 0, slot = 0;
        uint64_t window = 0;
    };

    void run_step(int64_t max_emit, std::vector<int32_t>& out, int k_round);
    // Submit and remember as the stage's last op; while here_, run_here instead (and an
    // empty event back).
    DeviceEvent on(size_t stage, std::function<void()> op);
    // op on `stage` on the calling thread (StagePipe::run), once the stage's queued ops
    // are done (their error thrown here).
    void run_here(size_t stage, const std::function<void()>& op);
    // Stage `stage`'s state into (save, for a window of `rows` rows) or back from snapshot
    // slot `slot`: queued or on the host (PipelineOptions::snap_overlap).
    void state_copy(size_t stage, int slot, bool save, int64_t rows = 0);
    void snapshot(size_t stage, int slot, int64_t rows) { state_copy(stage, slot, true, rows); }
    void restore(size_t stage, int slot) { state_copy(stage, slot, false); }
    void drain() noexcept;                              // wait for both stages, errors ignored
    void fail_cleanup() noexcept;

    Runner& runner_;
    StagePipe& pipe_;
    int seq_;
    const Sampler& sampler_;
    SpecOptions opt_;
    PipelineOptions popt_;
    MtpChain chain_;
    MtpCall call_;
    SpecStats stats_;
    PipelineStats pstats_;
    std::atomic<int64_t> cut_{0};  // counted by stage 0's ops
    std::atomic<int64_t> log_rollbacks_{0}, replays_{0};  // counted by the stages' ops
    std::array<DeviceEvent, 2> last_ev_;  // the last op queued on each stage

    // One Verifier per stage, on its target (the window's buffer set and snapshot slot).
    std::array<StageTarget, 2> stage_;
    std::array<Verifier, 2> verifier_;

    int32_t last_ = 0;  // committed, not yet evaluated
    int64_t n_ = 0;     // positions both stages hold (committed)
    int verified_buf_ = -1;  // buffer set of the last verified window (logits)
    MtpPairs pend_;  // committed pairs the MTP has not seen
    void feed_but_newest();  // all pending pairs but the newest to the MTP, on the last stage

    // The window to verify next when the previous verdict kept an early window.
    Early* ready_ = nullptr;
    std::array<Early, 2> early_;
    int early_next_ = 0;    // which Early the next guess uses
    int buf_next_ = 0;      // buffer set of the next new window
    int64_t n_early_ = 0;   // early windows started (FORCE_MISS=2 counts them)
    bool broken_ = false;   // an op failed; the sequence must be reset
    bool here_ = false;     // this step starts no early window: its ops run on the host (run_step)

    Draft draft_;
    std::vector<float> probs_;
};

}  // namespace strata
