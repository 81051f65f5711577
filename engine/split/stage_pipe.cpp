// The stage pipe of a two-stage split (engine/split/stage_pipe.h): each stage's half of a
// pipelined verify window, queued separately, on two buffer sets.

#include "engine/split/split_runner_impl.h"

namespace strata::split_detail {

Pipe::Pipe(SplitRunnerImpl& r) : r_(r) {
    const int64_t E = r.model_->hp().n_embd, V = r.model_->hp().n_vocab;
    const auto rows = static_cast<size_t>(kMaxRows);
    for (Set& set : sets_) {
        set.handoff = r.make_handoff(0, rows * static_cast<size_t>(E));
        const size_t act = sizeof(float) * rows * static_cast<size_t>(E);
        set.x0 = r.stages_[0].dev->ops().alloc(act);
        set.x1 = r.stages_[1].dev->ops().alloc(act);
        set.in1 = r.stages_[1].dev->ops().alloc(act);
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

void Pipe::run(size_t stage, const std::function<void()>& op) {
    STRATA_CHECK(stage < r_.stages_.size(), "no stage {}", stage);
    r_.run_on(stage, op, r_.cfg_.host_timeout_ms, r_.window_);
}

void Pipe::wait_event(size_t stage, const DeviceEvent& ev) {
    STRATA_CHECK(stage < r_.stages_.size(), "no stage {}", stage);
    r_.stages_[stage].dev->wait_event(ev);
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
    StageStep step;
    step.batch = &batch;
    step.window = window;
    step.cancel = cancel;
    const std::span<const int32_t> toks[1] = {tokens};
    const Model::OutputWant want{true, set.hidden.data()};
    if (stage == 0) {
        step.tokens = toks;
        step.x = static_cast<float*>(set.x0.data());
        if (mode == Mode::Verify) {
            step.out = set.handoff.get();  // STRATA_TEST_HANDOFF_DROP: the flag of the Nth window stays down
            step.drop = r_.cfg_.drop_window > 0 && window == static_cast<uint64_t>(r_.cfg_.drop_window);
        }
    } else {
        step.x = static_cast<float*>(set.x1.data());
        const Tensor kept = Tensor::f32(static_cast<float*>(set.in1.data()), E, T);
        if (mode == Mode::Verify) {
            step.in = set.handoff.get();
            step.wait_ms = r_.cfg_.wait_ms;
            step.keep_in = kept.f();  // stage 0 may publish into this set again before a replay
            step.head = true;
            step.want = std::span<const Model::OutputWant>(&want, 1);
            step.logits = set.logits.data();
        } else {
            st.ctx->ops.copy(Tensor::f32(step.x, E, T), kept);  // a replay reuses the rows its verify received
        }
    }
    const StepEnd end = run_stage_step(*r_.model_, st, step);
    if (end == StepEnd::Cancelled) return false;
    if (end == StepEnd::HandInFailed) {
        const Handoff::Wait res = set.handoff->failure();
        {
            std::lock_guard<std::mutex> lk(r_.stats_mu_);
            ++r_.stats_.handoff_timeouts;
        }
        throw HandoffError(fmt::format(
            "hand-off failed: stage 1 ({}) waited for stage 0 ({}) {} in pipelined window {}; the request was "
            "cancelled",
            r_.plan_.stages[1].device, r_.plan_.stages[0].device,
            res == Handoff::Wait::TimedOut ? fmt::format("longer than STRATA_SPLIT_WAIT_MS={} ms", r_.cfg_.wait_ms)
                                           : std::string("and was aborted"),
            window));
    }
    if (step.in) {
        std::lock_guard<std::mutex> lk(r_.stats_mu_);
        ++r_.stats_.handoff_waits;
        r_.stats_.wake_latency_us_sum += static_cast<double>(set.handoff->last_wake_latency_ns()) / 1000.0;
    }
    state.n_past = pos0 + T;
    return true;
}

void Pipe::snapshot(size_t stage, int seq, int slot, int64_t rows) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(stage < q.pipe_snaps.size() && slot >= 0 && slot < kSnapSlots, "no snapshot slot {}:{}", stage, slot);
    Ops& ops = r_.stages_[stage].dev->ops();
    SeqState& state = q.states[stage];
    q.pipe_snaps[stage][static_cast<size_t>(slot)].save(ops, state, /*lend=*/true);
    // The window after this snapshot fills the state's log (gdn_block); the other slot's
    // window, still undecided (the early window starts before the verdict on the one
    // before it), keeps its rows in the parked log. A parked log of this slot is stale.
    STRATA_CHECK(stage < q.parked_logs.size(), "no parked log for stage {}", stage);
    std::unique_ptr<GdnLog>& parked = q.parked_logs[stage];
    GdnLog* active = state.gdn_log.get();
    if (rows > 0 && active && active->armed() && active->owner() != slot) {
        if (!parked) parked = std::make_unique<GdnLog>(ops.allocator(), state.gdn->n_layers(), state.gdn->conv_dim(),
                                                       state.gdn->nv());
        std::swap(state.gdn_log, parked);
    } else if (parked && parked->owner() == slot) {
        parked->disarm();
    }
    arm_log(ops, state, rows, slot);
}

void Pipe::restore(size_t stage, int seq, int slot) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(stage < q.pipe_snaps.size() && slot >= 0 && slot < kSnapSlots, "no snapshot slot {}:{}", stage, slot);
    SeqState& state = q.states[stage];
    q.pipe_snaps[stage][static_cast<size_t>(slot)].load(r_.stages_[stage].dev->ops(), state);
    // Whatever the log holds belongs to a window now undone; the replay that may follow
    // must not complete a log a cut window left half filled.
    if (state.gdn_log) state.gdn_log->disarm();
}

bool Pipe::rollback(size_t stage, int seq, int slot, int64_t n) {
    Sequence& q = r_.sequence(seq);
    STRATA_CHECK(stage < q.pipe_snaps.size() && slot >= 0 && slot < kSnapSlots, "no snapshot slot {}:{}", stage, slot);
    STRATA_CHECK(n >= 1, "rollback: {} rows kept", n);
    const StateSnapshot& snap = q.pipe_snaps[stage][static_cast<size_t>(slot)];
    SeqState& state = q.states[stage];
    Stage& st = r_.stages_[stage];
    if (!snap.valid() || snap.n_past() + n > state.n_past) return false;
    std::unique_ptr<GdnLog>* parked = nullptr;
    if (state.gdn && (!state.gdn_log || !state.gdn_log->armed() || state.gdn_log->owner() != slot)) {
        // The window's rows may be parked: an early window took the state's log after it.
        parked = stage < q.parked_logs.size() ? &q.parked_logs[stage] : nullptr;
        if (!parked || !*parked || !(*parked)->armed() || (*parked)->owner() != slot) return false;
        std::swap(state.gdn_log, *parked);
    }
    if (!r_.model_->can_replay_log(*st.weights, state, n)) {
        if (parked) std::swap(state.gdn_log, *parked);  // as it was
        return false;
    }
    roll_back_stage(*r_.model_, st, state, snap, n);
    return true;
}

void Pipe::mtp_here(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                    float* hidden_out, int64_t draft_rows) {
    Sequence& q = r_.sequence(seq);
    r_.model_->mtp_forward(*r_.stages_.back().ctx, q.states.back(), hidden, tokens, T, pos0, logits,
                           hidden_out, /*last_only=*/true, draft_rows);
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

}  // namespace strata::split_detail
