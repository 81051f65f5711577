// The stage chain. Each stage owns a device, a layer range and, per sequence, the
// state of its layers; a window runs stage by stage, the activations crossing each
// boundary through a Handoff (the writer's last op publishes, the reader's first op
// waits). Serial mode runs stage i+1 only after stage i is done; overlap mode queues
// every later stage up front and lets the flags order them.
#include <chrono>
#include <cstring>

#include "engine/model/host_experts.h"
#include "engine/model/streaming.h"
#include "engine/split/split_runner_impl.h"

namespace strata {
namespace split_detail {

void SplitRunnerImpl::run_stage(size_t s, uint64_t w) {
    const bool last = s + 1 == stages_.size();
    StageStep step;
    step.batch = &win_batches_[s];
    step.x = static_cast<float*>(stages_[s].x.data());
    step.window = w;
    std::vector<std::span<const int32_t>> tokens;
    if (s == 0) {
        for (const std::vector<int32_t>& t : win_tokens_) tokens.emplace_back(t);
        step.tokens = tokens;
    }
    if (s > 0) step.in = handoffs_[s - 1].get(), step.wait_ms = cfg_.wait_ms;
    std::vector<Model::OutputWant> want;
    if (last) {
        for (size_t i = 0; i < win_all_.size(); ++i) want.push_back({win_all_[i], win_hidden_[i]});
        step.head = true;
        step.want = want;
        step.logits = win_logits_;
    } else {
        step.out = handoffs_[s].get();
        // Test hook: leave the flag down in the Nth window. The next stage waits for it
        // in either mode (serial mode starts that stage once this one is done).
        step.drop = cfg_.drop_window > 0 && w == static_cast<uint64_t>(cfg_.drop_window);
    }
    try {
        if (run_stage_step(*model_, stages_[s], step) == StepEnd::HandInFailed) {
            win_failed_[s] = static_cast<int>(step.in->failure());
            if (!last) handoffs_[s]->abort();  // release the stage after this one
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
            h = make_handoff(s, static_cast<size_t>(rows * E));
        }
    for (auto& st : stages_)
        if (st.x.size() < sizeof(float) * static_cast<size_t>(rows * E)) {
            st.x = Buffer();  // freed first: a budget holds one of them
            st.x = st.dev->ops().alloc(sizeof(float) * static_cast<size_t>(rows * E));
        }
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
    auto time_left = [&] {  // of the window's host timeout (0 = no limit)
        if (cfg_.host_timeout_ms == 0) return int64_t{0};
        const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
        return std::max<int64_t>(left, 1);
    };
    std::vector<DeviceEvent> events(stages_.size());
    std::exception_ptr op_error;
    if (overlap_) {
        // The later stages are queued up front (their launches, and the wake-up of a CPU
        // stage's thread, overlap stage 0's work); stage 0 runs on this thread, which
        // would otherwise only wait for it.
        for (size_t s = 1; s < stages_.size(); ++s) {
            stages_[s].dev->submit([this, s, w] { run_stage(s, w); });
            events[s] = stages_[s].dev->record();
        }
        try {
            run_on(0, [this, w] { run_stage(0, w); }, time_left(), w);
        } catch (...) {
            op_error = std::current_exception();  // run_stage released the stage after it
        }
        for (size_t s = 1; s < stages_.size(); ++s)
            if (!events[s].wait(time_left())) watchdog(s, w);
    } else {
        for (size_t s = 0; s < stages_.size(); ++s) {
            try {
                run_on(s, [this, s, w] { run_stage(s, w); }, time_left(), w);
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
                          float* logits_rows, float* hidden_out, int64_t draft_rows) {
    STRATA_CHECK(model_->has_mtp(), "this model has no MTP block");
    STRATA_CHECK(T > 0, "mtp: no pairs");
    Sequence& q = sequence(seq);
    Stage& st = stages_.back();
    SeqState& state = q.states.back();
    const int64_t E = model_->hp().n_embd, V = model_->hp().n_vocab;
    mtp_hidden_.assign(hidden, hidden + T * E);
    mtp_tokens_.assign(tokens, tokens + T);
    mtp_logits_.resize(static_cast<size_t>(V));
    mtp_hidden_out_.resize(static_cast<size_t>(E));
    const bool want_logits = logits_rows != nullptr, want_hidden = hidden_out != nullptr;
    auto op = [this, &st, &state, T, pos0, want_logits, want_hidden, draft_rows] {
        model_->mtp_forward(*st.ctx, state, mtp_hidden_.data(), mtp_tokens_.data(), T, pos0,
                            want_logits ? mtp_logits_.data() : nullptr, want_hidden ? mtp_hidden_out_.data() : nullptr,
                            /*last_only=*/true, draft_rows);
    };
    run_on(stages_.size() - 1, op, cfg_.host_timeout_ms, window_);
    if (logits_rows) std::copy(mtp_logits_.begin(), mtp_logits_.end(), logits_rows);
    if (hidden_out) std::copy(mtp_hidden_out_.begin(), mtp_hidden_out_.end(), hidden_out);
}

void SplitRunnerImpl::run_on(size_t s, const std::function<void()>& op, int64_t limit_ms, uint64_t w) {
    if (!alarm_) {  // nothing to bound
        stages_[s].dev->run(op);
        return;
    }
    watched_stage_.store(s);
    watched_window_.store(w);
    alarm_->arm(std::chrono::milliseconds(limit_ms));
    try {
        stages_[s].dev->run(op);
    } catch (...) {
        if (alarm_->disarm()) watchdog(s, w);
        throw;
    }
    if (alarm_->disarm()) watchdog(s, w);
}

void SplitRunnerImpl::alarm_fired() {
    const size_t s = watched_stage_.load();
    spdlog::error("watchdog: window {} not done after STRATA_HOST_TIMEOUT_MS={} ms (stage {} on {}); releasing its "
                  "waits",
                  watched_window_.load(), cfg_.host_timeout_ms, s, plan_.stages[s].device);
    for (auto& h : handoffs_) h->abort();  // a wait for a flag that will not rise returns
    if (pipe_) pipe_->abort();
}

bool SplitRunnerImpl::rollback(int seq, int64_t n_keep) {
    Sequence& q = sequence(seq);
    STRATA_CHECK(n_keep >= 1, "rollback: {} rows kept", n_keep);
    if (q.snaps.size() != q.states.size() || q.snaps.empty() || q.snaps.front().n_past() + n_keep > q.n_past) return false;
    for (size_t s = 0; s < stages_.size(); ++s)
        if (!q.snaps[s].valid() || !model_->can_replay_log(*stages_[s].weights, q.states[s], n_keep)) return false;
    on_every_stage(
        [this, &q, n_keep](size_t s) { roll_back_stage(*model_, stages_[s], q.states[s], q.snaps[s], n_keep); });
    q.n_past = q.states.front().n_past;
    return true;
}

void SplitRunnerImpl::on_every_stage(const std::function<void(size_t)>& op, bool spread) {
    if (!spread) {
        for (size_t s = 0; s < stages_.size(); ++s) run_on(s, [&op, s] { op(s); }, cfg_.host_timeout_ms, window_);
        return;
    }
    std::vector<DeviceEvent> events(stages_.size());
    for (size_t s = 0; s < stages_.size(); ++s) {
        stages_[s].dev->submit([&op, s] { op(s); });
        events[s] = stages_[s].dev->record();
    }
    for (size_t s = 0; s < stages_.size(); ++s)
        if (!events[s].wait(cfg_.host_timeout_ms)) watchdog(s, window_);
    for (const DeviceEvent& ev : events) ev.rethrow();
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
    for (auto& st : stages_)  // copies still landing in a slot: awaited, the slots forgotten
        if (st.weights->stream) st.dev->run([&st] { st.weights->stream->release(st.dev->ops()); });
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

}  // namespace split_detail

StagePipe* stage_pipe_of(Runner& r) {
    auto* s = dynamic_cast<SplitRunner*>(&r);
    return s ? s->stage_pipe() : nullptr;
}

namespace split_detail {

std::string SplitRunnerImpl::device_profile() const {
    std::string out;
    for (const Stage& st : stages_) {
        const std::string p = st.dev->ops().profile();
        if (!p.empty()) out += fmt::format("{} (layers {}-{}):\n{}", st.dev->name(), st.l0, st.l1 - 1, p);
        if (st.host)
            if (const std::string h = st.host->ops().profile(); !h.empty())
                out += fmt::format("{} (the experts in host memory of layers {}-{}):\n{}", st.host->name(), st.l0, st.l1 - 1, h);
    }
    return out;
}

Runner::Stats SplitRunnerImpl::runner_stats() const {
    Stats r = SplitRunner::runner_stats();
    for (const Stage& st : stages_) {
        r.device_peak_bytes = std::max(r.device_peak_bytes, st.dev->ops().meter().peak());
        const GraphCounts g = st.dev->ops().graph_counts();
        r.graph_direct += g.direct;
        r.graph_captured += g.captured;
        r.graph_replayed += g.replayed;
        if (st.weights && st.weights->host_experts) {
            const HostExperts::Stats h = st.weights->host_experts->stats();
            r.expert_rows_host += h.host_rows;
            r.expert_rows_device += h.device_rows;
            r.expert_reranks += h.reranks;
        }
        if (!st.weights || !st.weights->stream) continue;
        const LayerStream::Stats s = st.weights->stream->stats();
        r.stream_copies += s.copies;
        r.stream_bytes += s.bytes;
        r.prefetch_hits += s.prefetch_hits;
        r.sync_loads += s.sync_loads;
        r.stream_reused += s.reused;
        r.stream_wait_ms += s.wait_ms;
    }
    return r;
}

}  // namespace split_detail

std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type) {
    return make_local_runner(std::move(model), threads, n_ctx, cache_type, SplitConfig::process());
}

std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type, SplitConfig cfg) {
    SplitPlan plan;
    plan.stages.push_back({"cpu:0", 0, model->hp().n_layer});
    cfg.host_timeout_ms = 0;
    return make_split_runner(std::move(model), plan, threads, n_ctx, cache_type, cfg);
}

std::unique_ptr<SplitRunner> make_split_runner(std::shared_ptr<const Model> model, const SplitPlan& plan,
                                               int threads_per_device, int64_t n_ctx, GgmlType cache_type,
                                               const SplitConfig& cfg) {
    return std::make_unique<split_detail::SplitRunnerImpl>(std::move(model), plan, threads_per_device, n_ctx,
                                                           cache_type, cfg);
}

}  // namespace strata
