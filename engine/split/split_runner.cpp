// The stage chain. Each stage owns a device, a layer range and, per sequence, the
// state of its layers; a window runs stage by stage, the activations crossing each
// boundary through a Handoff (publish at the end of the writer's op, wait at the
// start of the reader's). Serial mode submits stage i+1 only after stage i is done;
// overlap mode submits every stage up front and lets the flags order them.
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <spdlog/spdlog.h>

#include "engine/backend/handoff.h"
#include "engine/split/split_runner.h"
#include "engine/state/snapshot.h"

namespace strata {
namespace {

struct Stage {
    std::unique_ptr<Device> dev;
    std::unique_ptr<ForwardCtx> ctx;  // the device's ops and this stage's window buffers
    int64_t l0 = 0, l1 = 0;
    std::vector<float> x;  // [rows, n_embd] this stage's activations (device memory on GPUs)
};

struct Sequence {
    int64_t n_past = 0;
    std::vector<SeqState> states;  // one per stage, for that stage's layers
    std::vector<StateSnapshot> snaps;  // per stage, empty until the first snapshot()
    // Pipelined windows: per stage, StagePipe::kSnapSlots snapshots (allocated with the
    // sequence when the pipe is on).
    std::vector<std::array<StateSnapshot, StagePipe::kSnapSlots>> pipe_snaps;
};

class SplitRunnerImpl;

// The stage pipe of a two-stage split (engine/run/stage_pipe.h). Both buffer sets are
// allocated here, when the runner starts.
class Pipe final : public StagePipe {
public:
    explicit Pipe(SplitRunnerImpl& r);
    DeviceEvent submit(size_t stage, std::function<void()> op) override;
    void wait(const DeviceEvent& ev, size_t stage) override;
    bool forward(size_t stage, int seq, std::span<const int32_t> tokens, int64_t pos0, int buf, uint64_t window,
                 Mode mode, const std::atomic<bool>* cancel) override;
    void snapshot(size_t stage, int seq, int slot) override;
    void restore(size_t stage, int seq, int slot) override;
    void mtp_here(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                  float* hidden_out) override;
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
        std::vector<float> x0, x1;         // [kMaxRows, n_embd] each stage's activations
        std::vector<float> in1;            // [kMaxRows, n_embd] stage 1's hand-in, kept for a replay
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
        std::map<std::string, Device*> opened;
        bool shared_device = false;
        for (const StagePlan& sp : plan.stages) {
            Stage st;
            if (opened.count(sp.device)) shared_device = true;
            st.dev = open_device(sp.device, threads, core);
            st.ctx = std::make_unique<ForwardCtx>(ForwardCtx{st.dev->ops(), {}});
            core += threads;
            st.l0 = sp.l0;
            st.l1 = sp.l1;
            opened[sp.device] = st.dev.get();
            stages_.push_back(std::move(st));
        }
        overlap_ = cfg.overlap;
        if (overlap_ && shared_device) {
            spdlog::info("split: STRATA_SPLIT_OVERLAP is off: two stages share a device");
            overlap_ = false;
        }
        if (overlap_ && stages_.size() < 2) overlap_ = false;
        for (size_t s = 0; s + 1 < stages_.size(); ++s) handoffs_.push_back(std::make_unique<Handoff>(*stages_[s].dev, 0));
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
    std::string describe() const override {
        return plan_.describe() + (pipe_ ? " (pipelined windows)" : overlap_ ? " (overlap)" : " (serial)");
    }
    StagePipe* stage_pipe() override { return pipe_.get(); }

    int new_sequence() override {
        int id = 0;
        while (seqs_.count(id)) ++id;
        seqs_.emplace(id, fresh_sequence());
        return id;
    }
    void free_sequence(int seq) override { seqs_.erase(seq); }
    void reset_sequence(int seq) override { sequence(seq) = fresh_sequence(); }
    int64_t n_past(int seq) const override { return const_cast<SplitRunnerImpl*>(this)->sequence(seq).n_past; }

    void eval(std::span<const Item> items, float* logits_rows) override;

    // The MTP block's state lives with the last stage (fresh_sequence), so its windows
    // run on that device only; no hand-off is involved.
    bool has_mtp() const override { return model_->has_mtp(); }
    void mtp(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits_rows,
             float* hidden_out) override;

    // The devices are idle between windows (the host waits for each), so the copies run
    // on the host here. On a GPU they would be device copies queued on each stage.
    void snapshot(int seq) override {
        Sequence& q = sequence(seq);
        q.snaps.resize(q.states.size());
        for (size_t s = 0; s < q.states.size(); ++s) q.snaps[s].save(q.states[s]);
    }
    void restore(int seq) override {
        Sequence& q = sequence(seq);
        STRATA_CHECK(!q.snaps.empty(), "sequence {} has no snapshot", seq);
        for (size_t s = 0; s < q.states.size(); ++s) q.snaps[s].load(q.states[s]);
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

private:
    friend class Pipe;

    Sequence fresh_sequence() const {
        Sequence q;
        for (size_t s = 0; s < stages_.size(); ++s)
            q.states.push_back(model_->new_state(n_ctx_, cache_type_, stages_[s].l0, stages_[s].l1,
                                                 /*with_mtp=*/s + 1 == stages_.size()));
        if (pipe_) {  // the pipeline's snapshot memory, allocated up front
            q.pipe_snaps.resize(stages_.size());
            for (size_t s = 0; s < stages_.size(); ++s)
                for (StateSnapshot& snap : q.pipe_snaps[s]) {
                    snap.save(q.states[s]);
                    snap.invalidate();
                }
        }
        return q;
    }
    Sequence& sequence(int seq) {
        auto it = seqs_.find(seq);
        STRATA_CHECK(it != seqs_.end(), "no sequence {}", seq);
        return it->second;
    }
    void run_stage(size_t s, uint64_t w);
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

void SplitRunnerImpl::run_stage(size_t s, uint64_t w) {
    Stage& st = stages_[s];
    const bool last = s + 1 == stages_.size();
    const int64_t E = model_->hp().n_embd;
    const Batch& batch = win_batches_[s];
    const int64_t rows = batch.n_rows;
    ForwardCtx& ctx = *st.ctx;
    float* x = st.x.data();
    try {
        if (s == 0) {
            for (size_t i = 0; i < win_tokens_.size(); ++i)
                model_->embed(*st.ctx, win_tokens_[i].data(), batch.seqs[i].n, x + batch.seqs[i].row0 * E);
        } else {
            Handoff& in = *handoffs_[s - 1];
            if (!ctx.ops.handoff_wait(in, w, cfg_.wait_ms, Tensor::f32(x, E, rows))) {
                win_failed_[s] = static_cast<int>(in.failure());
                if (!last) handoffs_[s]->abort();  // release the stage after this one
                return;                            // finish without using the payload
            }
        }
        model_->run_layers(ctx, batch, st.l0, st.l1, x);
        if (!last) {
            // Test hook: leave the flag down in the Nth window (overlap mode only; in
            // serial mode the host orders the stages and the flag is not waited for).
            const bool drop = overlap_ && cfg_.drop_window > 0 && w == static_cast<uint64_t>(cfg_.drop_window);
            ctx.ops.handoff_publish(Tensor::f32(x, E, rows), *handoffs_[s], w, drop);
        } else {
            std::vector<Model::OutputWant> want;
            for (size_t i = 0; i < batch.seqs.size(); ++i) want.push_back({win_all_[i], win_hidden_[i]});
            model_->output(ctx, batch, x, want, win_logits_);
        }
    } catch (...) {
        if (!last) handoffs_[s]->abort();  // never leave the next stage spinning
        throw;
    }
}

void SplitRunnerImpl::eval(std::span<const Item> items, float* logits_rows) {
    // Check everything before any state changes.
    const HParams& hp = model_->hp();
    int64_t rows = 0;
    for (const Item& it : items) {
        Sequence& q = sequence(it.seq);
        const int64_t T = static_cast<int64_t>(it.tokens.size());
        STRATA_CHECK(T > 0, "eval: no tokens");
        if (q.n_past + T > n_ctx_)
            fail("the prompt needs {} positions but the context holds {} ({} already used)", q.n_past + T, n_ctx_,
                 q.n_past);
        for (int32_t id : it.tokens)
            if (id < 0 || id >= hp.n_vocab) fail("token id {} is out of range (vocabulary has {})", id, hp.n_vocab);
        rows += T;
    }
    const int64_t E = hp.n_embd;
    const uint64_t w = ++window_;
    {
        std::lock_guard<std::mutex> lk(stats_mu_);
        ++stats_.windows;
    }

    // The devices are idle here: size the buffers for this window.
    for (auto& h : handoffs_)
        if (h->capacity() < static_cast<size_t>(rows * E)) {
            const size_t s = &h - handoffs_.data();
            h = std::make_unique<Handoff>(*stages_[s].dev, static_cast<size_t>(rows * E));
        }
    for (auto& st : stages_)
        if (st.x.size() < static_cast<size_t>(rows * E)) st.x.resize(static_cast<size_t>(rows * E));
    win_tokens_.clear();
    win_all_.clear();
    win_hidden_.clear();
    for (const Item& it : items) {
        win_tokens_.emplace_back(it.tokens.begin(), it.tokens.end());
        win_all_.push_back(it.all_logits);
        win_hidden_.push_back(it.hidden_out);
    }
    win_batches_.assign(stages_.size(), Batch{});
    for (size_t s = 0; s < stages_.size(); ++s)
        for (const Item& it : items) {
            Sequence& q = sequence(it.seq);
            win_batches_[s].add(q.states[s], q.n_past, static_cast<int64_t>(it.tokens.size()));
        }
    win_failed_.assign(stages_.size(), 0);
    win_logits_ = logits_rows;

    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(cfg_.host_timeout_ms);
    auto wait_event = [&](const DeviceEvent& ev, size_t s) {
        int64_t left = 0;  // 0 = no limit
        if (cfg_.host_timeout_ms > 0) {
            left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
            if (left <= 0) left = 1;
        }
        if (!ev.wait(left)) watchdog(s, w);
    };
    std::vector<DeviceEvent> events(stages_.size());
    std::exception_ptr op_error;
    if (overlap_) {
        for (size_t s = 0; s < stages_.size(); ++s) {
            stages_[s].dev->submit([this, s, w] { run_stage(s, w); });
            events[s] = stages_[s].dev->record();
        }
        for (size_t s = 0; s < stages_.size(); ++s) wait_event(events[s], s);
    } else {
        for (size_t s = 0; s < stages_.size(); ++s) {
            stages_[s].dev->submit([this, s, w] { run_stage(s, w); });
            events[s] = stages_[s].dev->record();
            wait_event(events[s], s);
            try {
                events[s].rethrow();
            } catch (...) {
                op_error = std::current_exception();
                break;
            }
            if (win_failed_[s]) break;
        }
    }
    for (size_t s = 0; s < stages_.size() && !op_error; ++s) {
        try {
            events[s].rethrow();
        } catch (...) {
            op_error = std::current_exception();
        }
    }
    for (size_t s = 1; s < stages_.size(); ++s) {
        if (!win_failed_[s]) continue;
        const bool timed_out = win_failed_[s] == static_cast<int>(Handoff::Wait::TimedOut);
        if (!timed_out && op_error) break;  // aborted because an earlier stage failed: report that
        {
            std::lock_guard<std::mutex> lk(stats_mu_);
            ++stats_.handoff_timeouts;
        }
        for (auto& h : handoffs_) h->reset();
        throw HandoffError(fmt::format(
            "hand-off failed: stage {} ({}) waited for stage {} ({}) {} in window {}; the request was cancelled",
            s, plan_.stages[s].device, s - 1, plan_.stages[s - 1].device,
            timed_out ? fmt::format("longer than STRATA_SPLIT_WAIT_MS={} ms", cfg_.wait_ms) : std::string("and was aborted"),
            w));
    }
    if (op_error) {
        for (auto& h : handoffs_) h->reset();
        std::rethrow_exception(op_error);
    }
    {
        std::lock_guard<std::mutex> lk(stats_mu_);
        for (size_t s = 1; s < stages_.size(); ++s) {
            ++stats_.handoff_waits;
            stats_.wake_latency_us_sum += static_cast<double>(handoffs_[s - 1]->last_wake_latency_ns()) / 1000.0;
        }
    }
    for (const Item& it : items) {
        Sequence& q = sequence(it.seq);
        q.n_past += static_cast<int64_t>(it.tokens.size());
        for (SeqState& st : q.states) st.n_past = q.n_past;
    }
}

void SplitRunnerImpl::mtp(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0,
                          float* logits_rows, float* hidden_out) {
    STRATA_CHECK(model_->has_mtp(), "this model has no MTP block");
    STRATA_CHECK(T > 0, "mtp: no pairs");
    Sequence& q = sequence(seq);
    Stage& st = stages_.back();
    SeqState& state = q.states.back();
    const int64_t E = model_->hp().n_embd, V = model_->hp().n_vocab;
    mtp_hidden_.assign(hidden, hidden + T * E);
    mtp_tokens_.assign(tokens, tokens + T);
    mtp_logits_.resize(static_cast<size_t>(V));
    mtp_hidden_out_.resize(static_cast<size_t>(T * E));
    const bool want_logits = logits_rows != nullptr;
    st.dev->submit([this, &st, &state, T, pos0, want_logits] {
        model_->mtp_forward(*st.ctx, state, mtp_hidden_.data(), mtp_tokens_.data(), T, pos0,
                            want_logits ? mtp_logits_.data() : nullptr, mtp_hidden_out_.data(), /*last_logits_only=*/true);
    });
    const DeviceEvent ev = st.dev->record();
    if (!ev.wait(cfg_.host_timeout_ms)) watchdog(stages_.size() - 1, window_);
    ev.rethrow();
    if (logits_rows) std::copy(mtp_logits_.begin(), mtp_logits_.end(), logits_rows);
    if (hidden_out) std::copy(mtp_hidden_out_.begin(), mtp_hidden_out_.end(), hidden_out);
}

void SplitRunnerImpl::watchdog(size_t stuck_stage, uint64_t w) {
    spdlog::error("watchdog: window {} not done after STRATA_HOST_TIMEOUT_MS={} ms (stage {} on {}); restarting",
                  w, cfg_.host_timeout_ms, stuck_stage, plan_.stages[stuck_stage].device);
    for (auto& h : handoffs_) h->abort();  // every spinning wait returns
    if (pipe_) pipe_->abort();
    for (auto& st : stages_) {
        const DeviceEvent drained = st.dev->record();
        if (!drained.wait(std::max<int64_t>(cfg_.host_timeout_ms, 1000)))
            fail("device {} did not drain after the watchdog fired; the engine cannot recover", st.dev->name());
    }
    for (auto& h : handoffs_) h->reset();
    if (pipe_) pipe_->reset();
    for (auto& [id, q] : seqs_) q = fresh_sequence();  // weights stay loaded; state is rebuilt
    {
        std::lock_guard<std::mutex> lk(stats_mu_);
        ++stats_.restarts;
    }
    throw EngineRestarted(fmt::format(
        "the engine restarted: window {} did not finish within STRATA_HOST_TIMEOUT_MS={} ms; the request was "
        "cancelled and every sequence's state was reset",
        w, cfg_.host_timeout_ms));
}

Pipe::Pipe(SplitRunnerImpl& r) : r_(r) {
    const int64_t E = r.model_->hp().n_embd, V = r.model_->hp().n_vocab;
    const auto rows = static_cast<size_t>(kMaxRows);
    for (Set& set : sets_) {
        set.handoff = std::make_unique<Handoff>(*r.stages_[0].dev, rows * static_cast<size_t>(E));
        set.x0.resize(rows * static_cast<size_t>(E));
        set.x1.resize(rows * static_cast<size_t>(E));
        set.in1.resize(rows * static_cast<size_t>(E));
        set.logits.resize(rows * static_cast<size_t>(V));
        set.hidden.resize(rows * static_cast<size_t>(E));
    }
    set_bytes_ = sizeof(float) * rows * static_cast<size_t>(5 * E + V);
    spdlog::info("pipelined windows: 2 buffer sets per stage ({:.1f} KiB each, up to {} rows)",
                 static_cast<double>(set_bytes_) / 1024.0, kMaxRows);
}

DeviceEvent Pipe::submit(size_t stage, std::function<void()> op) {
    STRATA_CHECK(stage < r_.stages_.size(), "no stage {}", stage);
    Device& dev = *r_.stages_[stage].dev;
    dev.submit(std::move(op));
    return dev.record();
}

void Pipe::wait(const DeviceEvent& ev, size_t stage) {
    if (!ev.wait(r_.cfg_.host_timeout_ms)) r_.watchdog(stage, r_.window_);
    ev.rethrow();
}

bool Pipe::forward(size_t stage, int seq, std::span<const int32_t> tokens, int64_t pos0, int buf, uint64_t window,
                   Mode mode, const std::atomic<bool>* cancel) {
    STRATA_CHECK(stage < 2, "the stage pipe has stages 0 and 1, not {}", stage);
    const int64_t T = static_cast<int64_t>(tokens.size()), E = r_.model_->hp().n_embd;
    STRATA_CHECK(T >= 1 && T <= kMaxRows, "a pipelined window holds 1..{} rows, not {}", kMaxRows, T);
    if (pos0 + T > r_.n_ctx_) fail("the window needs {} positions but the context holds {}", pos0 + T, r_.n_ctx_);
    Set& set = sets_[check_buf(buf)];
    Sequence& q = r_.sequence(seq);
    Stage& st = r_.stages_[stage];
    SeqState& state = q.states[stage];
    const Batch batch = Batch::single(state, pos0, T);
    ForwardCtx& ctx = *st.ctx;
    const size_t bytes = sizeof(float) * static_cast<size_t>(T * E);
    if (stage == 0) {
        float* x = set.x0.data();
        r_.model_->embed(ctx, tokens.data(), T, x);
        for (int64_t l = st.l0; l < st.l1; ++l) {
            if (cancel && cancel->load(std::memory_order_acquire)) return false;
            r_.model_->run_layers(ctx, batch, l, l + 1, x);
        }
        if (mode == Mode::Verify)  // STRATA_TEST_HANDOFF_DROP: the flag of the Nth window stays down
            ctx.ops.handoff_publish(Tensor::f32(x, E, T), *set.handoff, window,
                                    r_.cfg_.drop_window > 0 && window == static_cast<uint64_t>(r_.cfg_.drop_window));
    } else {
        if (mode == Mode::Verify) {
            if (!ctx.ops.handoff_wait(*set.handoff, window, r_.cfg_.wait_ms, Tensor::f32(set.in1.data(), E, T))) {
                const Handoff::Wait res = set.handoff->failure();
                {
                    std::lock_guard<std::mutex> lk(r_.stats_mu_);
                    ++r_.stats_.handoff_timeouts;
                }
                throw HandoffError(fmt::format(
                    "hand-off failed: stage 1 ({}) waited for stage 0 ({}) {} in pipelined window {}; the request "
                    "was cancelled",
                    r_.plan_.stages[1].device, r_.plan_.stages[0].device,
                    res == Handoff::Wait::TimedOut ? fmt::format("longer than STRATA_SPLIT_WAIT_MS={} ms", r_.cfg_.wait_ms)
                                                   : std::string("and was aborted"),
                    window));
            }
            std::lock_guard<std::mutex> lk(r_.stats_mu_);
            ++r_.stats_.handoff_waits;
            r_.stats_.wake_latency_us_sum += static_cast<double>(set.handoff->last_wake_latency_ns()) / 1000.0;
        }
        float* x = set.x1.data();
        std::memcpy(x, set.in1.data(), bytes);  // a replay reuses the rows its verify received
        r_.model_->run_layers(ctx, batch, st.l0, st.l1, x);
        if (mode == Mode::Verify) {
            const Model::OutputWant want{true, set.hidden.data()};
            r_.model_->output(ctx, batch, x, std::span<const Model::OutputWant>(&want, 1), set.logits.data());
        }
    }
    state.n_past = pos0 + T;
    return true;
}

void Pipe::snapshot(size_t stage, int seq, int slot) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(stage < q.pipe_snaps.size() && slot >= 0 && slot < kSnapSlots, "no snapshot slot {}:{}", stage, slot);
    q.pipe_snaps[stage][static_cast<size_t>(slot)].save(q.states[stage]);
}

void Pipe::restore(size_t stage, int seq, int slot) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(stage < q.pipe_snaps.size() && slot >= 0 && slot < kSnapSlots, "no snapshot slot {}:{}", stage, slot);
    q.pipe_snaps[stage][static_cast<size_t>(slot)].load(q.states[stage]);
}

void Pipe::mtp_here(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                    float* hidden_out) {
    Sequence& q = r_.sequence(seq);
    r_.model_->mtp_forward(*r_.stages_.back().ctx, q.states.back(), hidden, tokens, T, pos0, logits,
                           hidden_out, /*last_logits_only=*/true);
}

void Pipe::set_n_past(int seq, int64_t n) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(n >= 0 && n <= r_.n_ctx_, "n_past {} outside the context {}", n, r_.n_ctx_);
    q.n_past = n;
    for (SeqState& st : q.states) st.n_past = n;
}

uint64_t Pipe::next_window() {
    std::lock_guard<std::mutex> lk(r_.stats_mu_);
    ++r_.stats_.windows;
    return ++r_.window_;
}

}  // namespace

std::unique_ptr<SplitRunner> make_split_runner(std::shared_ptr<const Model> model, const SplitPlan& plan,
                                               int threads_per_device, int64_t n_ctx, GgmlType cache_type,
                                               const SplitConfig& cfg) {
    return std::make_unique<SplitRunnerImpl>(std::move(model), plan, threads_per_device, n_ctx, cache_type, cfg);
}

}  // namespace strata
