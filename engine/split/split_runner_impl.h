// The split runner's insides, shared by its two source files: split_runner.cpp (the
// stage chain: windows through every stage, the watchdog) and stage_pipe.cpp (the stage
// pipe of pipelined windows). Not for use outside engine/split.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/backend/handoff.h"
#include "engine/core/alarm.h"
#include "engine/split/split_runner.h"
#include "engine/split/snapshot.h"

namespace strata::split_detail {

struct Stage {
    std::unique_ptr<Device> dev;
    std::unique_ptr<Device> host;  // a CPU device for experts in host memory (null: none); outlives weights
    std::unique_ptr<StageWeights> weights;  // its layers (and embedding / head), prepared for dev
    std::unique_ptr<ForwardCtx> ctx;        // the device's ops, those weights, this stage's window buffers
    int64_t l0 = 0, l1 = 0;
    Buffer x;  // [rows, n_embd] this stage's activations, memory of dev
    std::string placement;  // the planner's line under a budget (empty: none)
};

// The placement of stage sp on dev under the budget cfg gives its device, with its
// experts on `host` when cfg keeps them there (null: neither), its line in *line
// (stage_placement.cpp).
std::unique_ptr<StagePlacement> plan_stage(const Model& m, Device& dev, Device* host, const StagePlan& sp, bool first,
                                           bool last, const SplitConfig& cfg, int64_t n_ctx, GgmlType cache_type,
                                           std::string* line);

// One stage's part of a window (stage_step.cpp), the body of every schedule: the rows
// come in as the embedding of `tokens` (the first stage), through the hand-in `in`, or
// are in x already (a replay); then the stage's layers, checking `cancel` (may be null)
// before each; then the hand-out `out` (publish) and, on the last stage, the head.
struct StageStep {
    const Batch* batch = nullptr;
    std::span<const std::span<const int32_t>> tokens;  // per sequence of the batch: embed them (first stage)
    float* x = nullptr;                            // [rows, n_embd] the stage's activations
    Handoff* in = nullptr;                         // the hand-in to wait for
    int64_t wait_ms = 0;                           // its bound (0 = no limit)
    float* keep_in = nullptr;                      // also copy the hand-in rows here (for a replay)
    Handoff* out = nullptr;                        // the hand-out to publish
    bool drop = false;                             // STRATA_TEST_HANDOFF_DROP: leave its word down
    uint64_t window = 0;                           // the hand-off sequence number
    const std::atomic<bool>* cancel = nullptr;
    bool head = false;                             // run Model::output with want / logits
    std::span<const Model::OutputWant> want;
    float* logits = nullptr;
};
enum class StepEnd { Done, HandInFailed, Cancelled };
StepEnd run_stage_step(const Model& model, Stage& st, const StageStep& step);
// One stage's rollback (Runner::rollback, Pipe::rollback): the state from `snap`, then on
// through the first n rows its log kept (the caller checked Model::can_replay_log).
void roll_back_stage(const Model& model, Stage& st, SeqState& state, const StateSnapshot& snap, int64_t n);

struct Sequence {
    int64_t n_past = 0;
    std::vector<SeqState> states;  // one per stage, for that stage's layers
    std::vector<StateSnapshot> snaps;  // per stage, empty until the first snapshot()
    // Pipelined windows: per stage, StagePipe::kSnapSlots snapshots (allocated with the
    // sequence when the pipe is on).
    std::vector<std::array<StateSnapshot, StagePipe::kSnapSlots>> pipe_snaps;
    // Per stage, the GDN log of the other slot's window, parked while an early window
    // fills the state's own (Pipe::snapshot): a rejected window then rolls back on stage 0
    // too. Sized with pipe_snaps; each log allocated at its stage's first early window.
    std::vector<std::unique_ptr<GdnLog>> parked_logs;
};

class SplitRunnerImpl;

// The stage pipe of a two-stage split (engine/split/stage_pipe.h). Both buffer sets are
// allocated here, when the runner starts.
class Pipe final : public StagePipe {
public:
    explicit Pipe(SplitRunnerImpl& r);
    DeviceEvent submit(size_t stage, std::function<void()> op) override;
    void run(size_t stage, const std::function<void()>& op) override;
    void wait_event(size_t stage, const DeviceEvent& ev) override;
    void wait(const DeviceEvent& ev, size_t stage) override;
    bool forward(size_t stage, int seq, std::span<const int32_t> tokens, int64_t pos0, int buf, uint64_t window,
                 Mode mode, const std::atomic<bool>* cancel) override;
    void snapshot(size_t stage, int seq, int slot, int64_t rows) override;
    void restore(size_t stage, int seq, int slot) override;
    bool rollback(size_t stage, int seq, int slot, int64_t n) override;
    void mtp_here(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                  float* hidden_out, int64_t draft_rows) override;
    float* logits(int buf) override { return sets_[check_buf(buf)].logits.data(); }
    const float* hidden(int buf) const override { return sets_[check_buf(buf)].hidden.data(); }
    void set_n_past(int seq, int64_t n) override;
    void abort() override {
        for (Set& s : sets_) s.handoff->abort();
    }
    void reset() override {
        for (Set& s : sets_) s.handoff->reset();
    }
    uint64_t next_window() override;
    size_t second_set_bytes() const override { return set_bytes_; }

private:
    static size_t check_buf(int buf) {
        STRATA_CHECK(buf >= 0 && buf < kBuffers, "no buffer set {}", buf);
        return static_cast<size_t>(buf);
    }
    struct Set {
        std::unique_ptr<Handoff> handoff;  // stage 0 -> stage 1
        Buffer x0, x1;                     // [kMaxRows, n_embd] each stage's activations, on its device
        Buffer in1;                        // [kMaxRows, n_embd] stage 1's hand-in, kept for a replay
        std::vector<float> logits, hidden;  // [kMaxRows, n_vocab], [kMaxRows, n_embd] stage 1's output
    };
    SplitRunnerImpl& r_;
    Set sets_[kBuffers];
    size_t set_bytes_ = 0;
};

class SplitRunnerImpl final : public SplitRunner {
public:
    SplitRunnerImpl(std::shared_ptr<const Model> model, const SplitPlan& plan, int threads, int64_t n_ctx,
                    GgmlType cache_type, const SplitConfig& cfg)
        : model_(std::move(model)), n_ctx_(n_ctx), cache_type_(cache_type), cfg_(cfg), plan_(plan) {
        STRATA_CHECK(!plan.stages.empty(), "a split needs at least one stage");
        STRATA_CHECK(n_ctx > 0, "context length must be positive, got {}", n_ctx);
        int core = 0;
        for (const auto& [dev, bytes] : cfg.budgets) {
            bool known = false;
            for (const StagePlan& sp : plan.stages) known = known || sp.device == dev;
            if (!known) fail("--max-vram names {}, which runs no stage (devices: {})", dev, plan.describe());
        }
        std::map<std::string, Device*> opened;
        bool shared_device = false;
        for (const StagePlan& sp : plan.stages) {
            Stage st;
            if (opened.count(sp.device)) shared_device = true;
            // One stage has the machine to itself: its threads go where the OS puts them,
            // as any process's (the calling thread runs its windows: Device::run).
            st.dev = open_device(sp.device, threads, plan.stages.size() == 1 ? -1 : core, cfg.staged_copies,
                                 GpuOptions{cfg.gpu_graphs, cfg.gpu_profile}, cfg.cpu_profile);
            const bool first = stages_.empty(), last = stages_.size() + 1 == plan.stages.size();
            if (cfg.n_cpu_moe != 0 && model_->experts_on_host(sp.l0, cfg.n_cpu_moe))
                st.host = open_device("cpu:0", threads, -1, false, {}, cfg.cpu_profile);  // the experts' own pool, not pinned
            const std::unique_ptr<StagePlacement> placed =
                plan_stage(*model_, *st.dev, st.host.get(), sp, first, last, cfg, n_ctx, cache_type, &st.placement);
            st.weights = model_->bind(st.dev->ops(), sp.l0, sp.l1, first, last, placed.get());
            st.ctx = std::make_unique<ForwardCtx>(st.dev->ops(), st.weights.get());
            core += threads;
            st.l0 = sp.l0;
            st.l1 = sp.l1;
            opened[sp.device] = st.dev.get();
            stages_.push_back(std::move(st));
        }
        overlap_ = cfg.overlap;
        if (cfg.shared_device_overlap) shared_device = false;
        if (overlap_ && shared_device) {
            spdlog::info("split: STRATA_SPLIT_OVERLAP is off: two stages share a device");
            overlap_ = false;
        }
        if (overlap_ && stages_.size() < 2) overlap_ = false;
        for (size_t s = 0; s + 1 < stages_.size(); ++s) handoffs_.push_back(make_handoff(s, 0));
        if (cfg.pipeline_windows == 2) {
            std::string why;
            if (stages_.size() != 2) why = fmt::format("the split has {} stage(s); it needs exactly 2", stages_.size());
            else if (shared_device) why = "both stages are on one device";
            if (!why.empty()) {
                spdlog::info("pipelined windows are off: {}", why);
            } else {
                if (overlap_) {
                    spdlog::info("split: STRATA_SPLIT_OVERLAP is off under --pipeline-windows 2 (the pipeline "
                                 "overlaps the stages its own way)");
                    overlap_ = false;
                }
                pipe_ = std::make_unique<Pipe>(*this);
            }
        }
        if (cfg.host_timeout_ms > 0)  // polled at an eighth of the limit: a fire comes at most that late
            alarm_ = std::make_unique<Alarm>([this] { alarm_fired(); },
                                             std::chrono::milliseconds(std::clamp<int64_t>(cfg.host_timeout_ms / 8, 1, 250)));
    }

    ~SplitRunnerImpl() override {
        // Nothing may still wait on a flag when the devices shut down.
        for (auto& h : handoffs_) h->abort();
        if (pipe_) pipe_->abort();
    }

    const Model& model() const override { return *model_; }
    int64_t n_ctx() const override { return n_ctx_; }
    bool overlap() const override { return overlap_; }
    SplitStats stats() const override {
        std::lock_guard<std::mutex> lk(stats_mu_);  // read from other threads (metrics)
        return stats_;
    }
    Stats runner_stats() const override;
    // Where the hand-off from stage s to s + 1 lives: pinned and mapped by a GPU on either
    // side. A CPU device's host memory is plain pageable memory, which a GPU reaches only
    // through the driver's page faults (HMM), if at all.
    Device& handoff_device(size_t s) const {
        Device& a = *stages_[s].dev;
        Device& b = *stages_[s + 1].dev;
        return a.ops().host_memory() && !b.ops().host_memory() ? b : a;
    }
    std::unique_ptr<Handoff> make_handoff(size_t s, size_t floats) const {
        auto h = std::make_unique<Handoff>(handoff_device(s), floats);
        Device& a = *stages_[s].dev;
        h->set_shared_device(!a.ops().host_memory() && a.name() == stages_[s + 1].dev->name());
        return h;
    }
    std::string device_profile() const override;
    std::string describe() const override {
        std::string placed;
        for (const Stage& st : stages_)
            if (!st.placement.empty()) placed += "; " + st.placement;
        if (stages_.size() == 1) return plan_.describe() + placed;
        return plan_.describe() + (pipe_ ? " (pipelined windows)" : overlap_ ? " (overlap)" : " (serial)") + placed;
    }
    StagePipe* stage_pipe() override { return pipe_.get(); }

    int new_sequence() override {
        int id = 0;
        while (seqs_.count(id)) ++id;
        seqs_.emplace(id, fresh_sequence());
        return id;
    }
    void free_sequence(int seq) override { seqs_.erase(seq); }
    // In place: the state, its snapshots and logs keep their memory for the next request
    // (a server's slot), so it pays no allocation (a GPU's, or a CPU's page faults) in
    // its prompt and first verify windows.
    void reset_sequence(int seq) override {
        Sequence& q = sequence(seq);
        on_every_stage([this, &q](size_t s) { clear_state(stages_[s].dev->ops(), q.states[s]); });
        q.n_past = 0;
        for (StateSnapshot& s : q.snaps) s.invalidate();
        for (auto& slots : q.pipe_snaps)
            for (StateSnapshot& s : slots) s.invalidate();
        for (auto& log : q.parked_logs)
            if (log) log->disarm();
    }
    int64_t n_past(int seq) const override { return const_cast<SplitRunnerImpl*>(this)->sequence(seq).n_past; }
    void truncate_sequence(int seq, int64_t n) override {
        Sequence& q = sequence(seq);
        STRATA_CHECK(n >= 0 && n <= q.n_past, "truncate: {} positions of sequence {}, which holds {}", n, seq, q.n_past);
        STRATA_CHECK(n == q.n_past || !model_->hp().hybrid(),
                     "truncate: a recurrent state cannot go back from {} to {} positions", q.n_past, n);
        q.n_past = n;
        for (SeqState& st : q.states) st.n_past = n;
    }

    void eval(std::span<const Item> items, float* logits_rows) override;

    // The MTP block's state lives with the last stage (fresh_sequence), so its windows
    // run on that device only; no hand-off is involved.
    bool has_mtp() const override { return model_->has_mtp(); }
    void mtp(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits_rows,
             float* hidden_out, int64_t draft_rows) override;
    int64_t draft_vocab() const override { return cfg_.draft_vocab; }

    // Copies on each stage's device, queued there (the devices are idle between windows,
    // so the host only waits for them); a CPU stage's snapshot lends its buffer instead of
    // copying the delta-rule states (snapshot.h).
    void snapshot(int seq, int64_t window_rows) override {
        Sequence& q = sequence(seq);
        q.snaps.resize(q.states.size());
        on_every_stage([this, &q, window_rows](size_t s) {
            q.snaps[s].save(stages_[s].dev->ops(), q.states[s], /*lend=*/true);
            arm_log(stages_[s].dev->ops(), q.states[s], window_rows);
        });
    }
    bool rollback(int seq, int64_t n_keep) override;
    void restore(int seq) override {
        Sequence& q = sequence(seq);
        STRATA_CHECK(!q.snaps.empty(), "sequence {} has no snapshot", seq);
        on_every_stage([this, &q](size_t s) { q.snaps[s].load(stages_[s].dev->ops(), q.states[s]); });
        q.n_past = q.states.front().n_past;
    }
    size_t snapshot_bytes() const override {
        size_t n = 0;
        for (const auto& [id, q] : seqs_) {
            for (const StateSnapshot& s : q.snaps) n += s.bytes();
            for (const auto& slots : q.pipe_snaps)
                for (const StateSnapshot& s : slots) n += s.bytes();
        }
        return n;
    }

    // Host copies of a sequence's state (state_copy.cpp), queued on every stage's device.
    size_t kv_bytes_per_pos() const override;
    size_t recurrent_bytes() const override;
    void save_state(int seq, std::span<const KvRange> kv, uint8_t* recurrent) override;
    void load_state(int seq, std::span<const KvRange> kv, const uint8_t* recurrent, int64_t n_past) override;

private:
    friend class Pipe;

    Sequence fresh_sequence() const {
        Sequence q;
        for (size_t s = 0; s < stages_.size(); ++s)
            q.states.push_back(model_->new_state(stages_[s].dev->ops(), n_ctx_, cache_type_, stages_[s].l0, stages_[s].l1,
                                                 /*with_mtp=*/s + 1 == stages_.size()));
        if (pipe_) {  // the pipeline's snapshot memory, allocated up front
            q.pipe_snaps.resize(stages_.size());
            q.parked_logs.resize(stages_.size());  // here: the stages' threads fill their own entries
            for (size_t s = 0; s < stages_.size(); ++s)
                for (StateSnapshot& snap : q.pipe_snaps[s]) snap.reserve(stages_[s].dev->ops(), q.states[s]);
        }
        return q;
    }
    Sequence& sequence(int seq) {
        auto it = seqs_.find(seq);
        STRATA_CHECK(it != seqs_.end(), "no sequence {}", seq);
        return it->second;
    }
    void run_stage(size_t s, uint64_t w);
    // op(s) on every stage's device, stage by stage on this thread (run_on), or with
    // `spread` queued on every device at once (large copies: each device does its own
    // part meanwhile); returns when all ran (rethrowing the first error), or runs the
    // watchdog.
    void on_every_stage(const std::function<void(size_t)>& op, bool spread = false);
    // op on stage s's device, on this thread once its queue is idle (Device::run),
    // returning when it is done and rethrowing its error. A serial window hops to no
    // queue thread: on a small VM waking one that went idle costs up to a millisecond,
    // and a split window with speculation took several (1.3-1.5x of its speed). The host
    // timeout (limit_ms > 0) is the alarm's: when it fires it releases every hand-off
    // wait, and once op is back the watchdog restarts the engine for window w.
    void run_on(size_t s, const std::function<void()>& op, int64_t limit_ms, uint64_t w);
    void alarm_fired();  // on the alarm's thread
    [[noreturn]] void watchdog(size_t stuck_stage, uint64_t w);

    std::shared_ptr<const Model> model_;
    int64_t n_ctx_;
    GgmlType cache_type_;
    SplitConfig cfg_;
    SplitPlan plan_;
    bool overlap_ = false;
    std::vector<Stage> stages_;
    std::vector<std::unique_ptr<Handoff>> handoffs_;  // handoffs_[s]: stage s -> s + 1
    std::unique_ptr<Pipe> pipe_;  // --pipeline-windows 2 on a two-stage split
    // The host timeout over what runs on this thread (run_on); null without one. Its
    // thread reads which stage and window it watches.
    std::unique_ptr<Alarm> alarm_;
    std::atomic<size_t> watched_stage_{0};
    std::atomic<uint64_t> watched_window_{0};
    std::map<int, Sequence> seqs_;
    uint64_t window_ = 0;
    mutable std::mutex stats_mu_;
    SplitStats stats_;  // guarded by stats_mu_

    // The window in flight. Kept in members, not on the host's stack: a device op must
    // never outlive what it reads, even if the host gives up on it.
    std::vector<std::vector<int32_t>> win_tokens_;
    std::vector<bool> win_all_;
    std::vector<float*> win_hidden_;  // per item: hidden rows wanted (null: none)
    // The MTP window in flight: inputs and outputs kept here for the same reason.
    std::vector<float> mtp_hidden_, mtp_logits_, mtp_hidden_out_;
    std::vector<int32_t> mtp_tokens_;
    std::vector<Batch> win_batches_;  // per stage
    std::vector<int> win_failed_;     // per stage: Handoff::Wait of its hand-in, as int (0 = fine)
    float* win_logits_ = nullptr;
};

}  // namespace strata::split_detail
