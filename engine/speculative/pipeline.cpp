#include "engine/speculative/pipeline.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/speculative/accept.h"

namespace strata {

namespace {
StagePipe& pipe_of(Runner& r) {
    StagePipe* p = stage_pipe_of(r);
    STRATA_CHECK(p != nullptr, "pipelined windows need a two-stage split started with --pipeline-windows 2");
    return *p;
}
using Mode = StagePipe::Mode;
}  // namespace

uint64_t PipelinedDecoder::last_stage_bytes(uint64_t head_bytes, uint64_t layer_bytes, int64_t draft_rows,
                                            int64_t n_vocab, int k) {
    STRATA_CHECK(n_vocab > 0 && draft_rows > 0 && k >= 1, "last_stage_bytes: {} draft rows of {}, k {}", draft_rows,
                 n_vocab, k);
    const double draft_head =
        static_cast<double>(head_bytes) * static_cast<double>(std::min(draft_rows, n_vocab)) / static_cast<double>(n_vocab);
    return head_bytes + static_cast<uint64_t>(k + 1) * layer_bytes +
           static_cast<uint64_t>(static_cast<double>(k + 2) * draft_head);
}

PipelinedDecoder::PipelinedDecoder(Runner& runner, int seq, const Sampler& sampler, const SpecOptions& opt,
                                   const PipelineOptions& popt)
    : runner_(runner),
      pipe_(pipe_of(runner)),
      seq_(seq),
      sampler_(sampler),
      opt_(opt),
      popt_(popt),
      chain_(runner.model().hp().n_embd, runner.model().hp().n_vocab, runner.draft_vocab()),
      stage_{StageTarget(*this, 0), StageTarget(*this, 1)},
      verifier_{Verifier(stage_[0]), Verifier(stage_[1])} {
    STRATA_CHECK(runner.has_mtp(), "speculative decoding needs a model with an MTP head");
    STRATA_CHECK(opt.k >= 1 && opt.k + 1 <= StagePipe::kMaxRows, "pipelined windows take 1..{} drafts, not {}",
                 StagePipe::kMaxRows - 1, opt.k);
    call_ = [this](const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits, float* hidden_out,
                   int64_t rows) { pipe_.mtp_here(seq_, hidden, tokens, T, pos0, logits, hidden_out, rows); };
    stats_.drafted_at.assign(static_cast<size_t>(opt.k), 0);
    stats_.accepted_at.assign(static_cast<size_t>(opt.k), 0);
    stats_.snapshot_bytes = runner.snapshot_bytes();
    pstats_.buffer_bytes = pipe_.second_set_bytes();
}

PipelinedDecoder::~PipelinedDecoder() { drain(); }

void PipelinedDecoder::start(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first,
                             int64_t from) {
    const int64_t E = runner_.model().hp().n_embd, n = static_cast<int64_t>(prompt.size());
    STRATA_CHECK(n > 0 && from >= 0 && from < n, "start: prompt of {} tokens from {}", n, from);
    pend_.from_prompt(prompt_hidden, prompt, first, E, from);
    chain_.observe(prompt.first(static_cast<size_t>(from)));  // the rest comes with the pairs
    stats_.draft_rows = chain_.draft_rows();
    n_ = n;
    last_ = first;
}

DeviceEvent PipelinedDecoder::on(size_t stage, std::function<void()> op) {
    if (here_) {
        run_here(stage, op);
        return {};
    }
    DeviceEvent ev = pipe_.submit(stage, std::move(op));
    last_ev_[stage] = ev;
    return ev;
}

void PipelinedDecoder::run_here(size_t stage, const std::function<void()>& op) {
    // What the stage's queue still holds (an early window) first: its error is this op's.
    if (last_ev_[stage].valid()) pipe_.wait(last_ev_[stage], stage);
    last_ev_[stage] = DeviceEvent();
    pipe_.run(stage, op);
}

void PipelinedDecoder::StageTarget::run(std::span<const int32_t> tokens, int64_t pos0, bool verify) {
    d.on(stage, [&dec = d, s = stage, toks = std::vector<int32_t>(tokens.begin(), tokens.end()), pos0, b = buf,
                 w = verify ? window : 0, verify] {
        dec.pipe_.forward(s, dec.seq_, toks, pos0, b, w, verify ? Mode::Verify : Mode::Replay, nullptr);
    });
}

bool PipelinedDecoder::StageTarget::rollback(std::span<const int32_t> kept, int64_t pos0) {
    // Whether the stage still holds the window's inputs is known on its queue only (an
    // early window may take the log over, or be cut part-way), so the op decides, and
    // restores and replays itself where it cannot roll back.
    if (!d.popt_.snap_overlap) return false;  // snapshots on the host: the Verifier's path
    d.on(stage, [&dec = d, s = stage, toks = std::vector<int32_t>(kept.begin(), kept.end()), pos0, b = buf, sl = slot] {
        if (dec.pipe_.rollback(s, dec.seq_, sl, static_cast<int64_t>(toks.size()))) {
            dec.log_rollbacks_.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        dec.replays_.fetch_add(1, std::memory_order_relaxed);
        dec.pipe_.restore(s, dec.seq_, sl);
        dec.pipe_.forward(s, dec.seq_, toks, pos0, b, 0, Mode::Replay, nullptr);
    });
    return true;
}

void PipelinedDecoder::state_copy(size_t stage, int slot, bool save, int64_t rows) {
    auto copy = [this, stage, slot, save, rows] {
        if (save) pipe_.snapshot(stage, seq_, slot, rows);
        else pipe_.restore(stage, seq_, slot);
    };
    if (popt_.snap_overlap) {  // a device op, queued behind the stage's work
        on(stage, copy);
        return;
    }
    if (last_ev_[stage].valid()) pipe_.wait(last_ev_[stage], stage);  // on the host, the stage drained
    copy();
}

void PipelinedDecoder::drain() noexcept {
    for (const DeviceEvent& ev : last_ev_)
        if (ev.valid()) ev.wait(0);
}

void PipelinedDecoder::fail_cleanup() noexcept {
    broken_ = true;
    ready_ = nullptr;
    for (Early& e : early_) e.cancel.store(true, std::memory_order_release);
    pipe_.abort();  // no op may stay in a hand-off wait
    drain();
    pipe_.reset();
}

void PipelinedDecoder::step(int64_t max_emit, std::vector<int32_t>& out, int k) {
    STRATA_CHECK(!broken_, "the pipelined decoder failed earlier; the sequence must be reset");
    STRATA_CHECK(k >= 0 && k <= opt_.k, "step: {} drafts asked, the decoder takes 1..{}", k, opt_.k);
    try {
        run_step(max_emit, out, k > 0 ? k : opt_.k);
    } catch (...) {
        fail_cleanup();
        throw;
    }
}

void PipelinedDecoder::run_step(int64_t max_emit, std::vector<int32_t>& out, int k_round) {
    STRATA_CHECK(max_emit >= 1, "step: nothing to emit");
    const int64_t V = runner_.model().hp().n_vocab, E = runner_.model().hp().n_embd;

    // --- The window W = [last, drafts] at position n_. Either stage 0 already ran it
    // (the previous verdict kept an early window) or it is drafted now.
    Early* prev = ready_;
    ready_ = nullptr;
    std::vector<int32_t> wtok{last_};
    std::vector<float> wprobs;
    int buf = 0, slot_w = 0;  // slot_w: stage 0's snapshot of its state from before W
    uint64_t w = 0;
    if (prev) {
        STRATA_CHECK(prev->guess.tokens.front() == last_, "pipeline: the kept early window does not start at the "
                                                          "committed token");
        wtok.insert(wtok.end(), prev->guess.tokens.begin() + 1, prev->guess.tokens.end());
        wprobs.assign(prev->guess.probs.begin() + 1, prev->guess.probs.end());
        buf = prev->buf;
        w = prev->window;
        slot_w = prev->slot;
        stage_[0].set(buf, slot_w, w);
        verifier_[0].adopt(wtok, n_);  // stage 0 ran it early, after its snapshot in slot_w
    } else {
        const int k = static_cast<int>(std::min<int64_t>(k_round, max_emit - 1));
        const int64_t pos = n_;
        run_here(1, [this, k, pos] {  // the host only waits for the drafts: no hop to stage 1's thread
            draft_.tokens.clear();
            draft_.probs.clear();
            chain_.feed(call_, pend_.hidden.data(), pend_.tokens.data(), pend_.size(), pend_.pos0);
            chain_.draft(call_, k, opt_.draft_min_p, draft_);
            if (opt_.edit_draft) {
                opt_.edit_draft(pos, k, draft_);
                STRATA_CHECK(static_cast<int>(draft_.tokens.size()) <= k, "edit_draft made {} drafts, k is {}",
                             draft_.tokens.size(), k);
            }
        });
        wtok.insert(wtok.end(), draft_.tokens.begin(), draft_.tokens.end());
        wprobs = draft_.probs;
        buf = buf_next_;
        buf_next_ ^= 1;
        w = pipe_.next_window();
        slot_w = 0;
        stage_[0].set(buf, slot_w, w);
    }
    const int64_t kd = static_cast<int64_t>(wtok.size()) - 1;
    const bool fed = !prev;  // whether this step's chain consumed the pending pairs

    // --- The guess for the next window, from the chain run on through W's drafts, as
    // if W were kept whole: [g (the bonus), e_1..e_j] at position n_ + kd + 1.
    const int64_t remaining = max_emit - (kd + 1);
    Early* e = nullptr;
    DeviceEvent ev_chain;
    // The chance that W is kept whole, as the drafts' own probabilities put it, and at
    // most as often as this request's windows of kd drafts were, times how often a first
    // draft was kept (the guess's first token must be the bonus): an MTP head that is
    // confidently wrong draws high probabilities for drafts it keeps a third of.
    double est = 1;
    for (float p : wprobs) est *= p;
    if (kd > 0 && stats_.drafted_at[static_cast<size_t>(kd - 1)] >= kMeasuredFrom)
        est = std::min(est, stats_.acceptance_at(static_cast<size_t>(kd - 1)) * stats_.acceptance_at(0));
    // The guess's first probability is at most 1, so where est is below theta already no
    // early window can start: the chain would run for nothing, and is not run.
    const bool may_start = popt_.theta <= 1.0 && remaining >= 1;
    if (may_start && est < popt_.theta) ++pstats_.below_theta;
    // Where no early window starts, nothing of this step overlaps: the host runs W's
    // halves, its commit and its state copies itself, one after the other as serial
    // windows do (StagePipe::run), rather than handing each to a stage's queue thread and
    // sleeping until it is done: on a CPU stage those wake-ups cost more than the rest of
    // the pipeline's bookkeeping (docs/spec.md).
    here_ = !(may_start && est >= popt_.theta);
    if (!prev) verifier_[0].run(wtok, n_);  // stage 0's half of W, unless it ran early
    if (!here_) {
        e = &early_[static_cast<size_t>(early_next_)];
        early_next_ ^= 1;
        e->guess.tokens.clear();
        e->guess.probs.clear();
        e->go = false;
        e->cancel.store(false, std::memory_order_relaxed);
        e->pos0 = n_ + kd + 1;
        e->buf = buf_next_;
        buf_next_ ^= 1;
        e->slot = 1 - slot_w;
        e->window = pipe_.next_window();
        const int j = static_cast<int>(std::min<int64_t>(k_round, remaining - 1));
        ev_chain = on(1, [this, e, prev, j, est, wtok] {
            if (prev) {  // the real pairs of the previous window, then W's drafts as given
                // the feed's prediction is overridden by W's first draft when W has one
                chain_.feed(call_, pend_.hidden.data(), pend_.tokens.data(), pend_.size(), pend_.pos0,
                            wtok.size() == 1);
                chain_.force(call_, std::span<const int32_t>(wtok).subspan(1));
            }
            chain_.draft(call_, j + 1, 0.0f, e->guess);
            if (opt_.edit_draft) {
                opt_.edit_draft(e->pos0 - 1, j + 1, e->guess);
                STRATA_CHECK(static_cast<int>(e->guess.tokens.size()) <= j + 1, "edit_draft made {} drafts, k is {}",
                             e->guess.tokens.size(), j + 1);
            }
            e->go = !e->guess.tokens.empty() && est * e->guess.probs.front() >= popt_.theta;
        });
    }
    const bool consumed = fed || e != nullptr;

    // --- Stage 1 verifies W.
    stage_[1].set(buf, 0, w);
    verifier_[1].run(wtok, n_);
    const DeviceEvent ev_verify = last_ev_[1];

    // --- Meanwhile stage 0 runs the guess.
    if (e) {
        auto run_early = [this, e](bool take_snapshot) {
            if (!e->go) return;
            if (take_snapshot) pipe_.snapshot(0, seq_, e->slot, static_cast<int64_t>(e->guess.tokens.size()));
            const std::vector<int32_t> toks = e->guess.tokens;
            if (!pipe_.forward(0, seq_, toks, e->pos0, e->buf, e->window, Mode::Verify,
                               popt_.doom_skip ? &e->cancel : nullptr))
                cut_.fetch_add(1, std::memory_order_relaxed);
        };
        if (popt_.prestage) {  // queued now; starts on the device the moment the chain is done
            // on the host, before it is queued (the guess is not drafted yet: no log kept)
            if (!popt_.snap_overlap) snapshot(0, e->slot, 0);
            // Stage 0's queue waits for the chain (a device operation, not the host); a
            // chain that failed left e->go false, so the early window does not run, and
            // the host reports the chain's error.
            pipe_.wait_event(0, ev_chain);
            on(0, [run_early, snap = popt_.snap_overlap] { run_early(snap); });
        } else {
            pipe_.wait(ev_chain, 1);
            if (e->go) {
                snapshot(0, e->slot, static_cast<int64_t>(e->guess.tokens.size()));
                on(0, [run_early] { run_early(false); });
            }
        }
    }

    // --- W's verdict.
    pipe_.wait(ev_verify, 1);
    const WindowOutcome o = verify_window(sampler_, pipe_.logits(buf), V,
                                          std::span<const int32_t>(wtok.data() + 1, static_cast<size_t>(kd)), probs_,
                                          opt_.matcher);
    const int64_t m = o.accepted;
    const int32_t y = o.token;
    stats_.add_window(kd, m);
    verified_buf_ = buf;

    const bool early_ran = e && e->go;  // the chain is done: stage 1 ran it before the verify
    bool hit = false;
    if (e && !e->go) ++pstats_.below_theta;
    if (early_ran) {
        ++pstats_.early;
        ++n_early_;
        hit = m == kd && e->guess.tokens.front() == y;
        const bool force = popt_.force_miss == 1 || (popt_.force_miss == 2 && n_early_ % 2 == 0);
        if (hit && force) {
            hit = false;
            ++pstats_.forced;
        }
        ++(hit ? pstats_.hits : pstats_.misses);
    }

    // --- Commit [last, d_1..d_m] on both stages: where drafts were rejected, back to
    // the state from before W, then the kept tokens.
    if (verifier_[1].commit(m)) ++stats_.rollbacks;
    if (early_ran && !hit) {
        e->cancel.store(true, std::memory_order_release);  // the doom skip: stop at the next layer
        // W kept whole: only the early window is undone (stage 0's state from before it);
        // else stage 0's commit below restores the state from before W.
        if (m == kd) restore(0, e->slot);
    }
    verifier_[0].commit(m);

    // --- Emit, and queue the committed pairs (H[n_ + i], token after it), i <= m, for the MTP.
    for (int64_t i = 0; i < m; ++i) out.push_back(wtok[static_cast<size_t>(i + 1)]);
    out.push_back(y);
    if (consumed) pend_.reset(n_);
    std::vector<int32_t> next(wtok.begin() + 1, wtok.begin() + 1 + m);
    next.push_back(y);
    pend_.append(pipe_.hidden(buf), next, E);
    n_ += m + 1;
    last_ = y;
    if (hit) ready_ = e;
}

std::span<const float> PipelinedDecoder::logits(size_t i) const {
    STRATA_CHECK(verified_buf_ >= 0, "logits: no window was verified yet");
    const size_t V = static_cast<size_t>(runner_.model().hp().n_vocab);
    return {pipe_.logits(verified_buf_) + i * V, V};
}

void PipelinedDecoder::advance(const float* hidden, int32_t next, bool paused) {
    STRATA_CHECK(!broken_, "the pipelined decoder failed earlier; the sequence must be reset");
    STRATA_CHECK(!ready_, "advance: call finish() before plain steps");
    const int64_t E = runner_.model().hp().n_embd;
    pend_.append(hidden, std::span<const int32_t>(&next, 1), E);
    ++n_;  // the plain step evaluated last_
    last_ = next;
    if (paused) {
        pend_.keep_last(kPausedPairs, E);
        return;
    }
    constexpr int64_t kMaxPending = 256;  // as SpecDecoder::advance: feed all but the newest
    if (pend_.size() > kMaxPending) feed_but_newest();
}

void PipelinedDecoder::feed_but_newest() {
    const int64_t T = pend_.size();
    if (T <= 1) return;
    try {
        run_here(1, [this, T] { chain_.feed(call_, pend_.hidden.data(), pend_.tokens.data(), T - 1, pend_.pos0); });
    } catch (...) {
        fail_cleanup();
        throw;
    }
    pend_.keep_last(1, runner_.model().hp().n_embd);
}

bool PipelinedDecoder::settle(std::vector<float>& row) {
    STRATA_CHECK(!broken_, "the pipelined decoder failed earlier; the sequence must be reset");
    STRATA_CHECK(!ready_, "settle: call finish() first");
    if (pend_.size() == 0 || pend_.pos0 + pend_.size() != n_) return false;
    feed_but_newest();
    row = pend_.hidden;
    return true;
}

int32_t PipelinedDecoder::guess() {
    STRATA_CHECK(!broken_, "the pipelined decoder failed earlier; the sequence must be reset");
    STRATA_CHECK(!ready_, "guess: call finish() before plain steps");
    const int64_t pos = n_;
    try {
        run_here(1, [this, pos] {
            draft_.tokens.clear();
            draft_.probs.clear();
            chain_.feed(call_, pend_.hidden.data(), pend_.tokens.data(), pend_.size(), pend_.pos0);
            chain_.draft(call_, 1, opt_.draft_min_p, draft_);
            if (opt_.edit_draft) opt_.edit_draft(pos, 1, draft_);
        });
    } catch (...) {
        fail_cleanup();
        throw;
    }
    pend_.reset(pend_.pos0 + pend_.size());
    return draft_.tokens.empty() ? -1 : draft_.tokens.front();
}

void PipelinedDecoder::finish() {
    if (broken_) return;
    try {
        for (size_t s = 0; s < last_ev_.size(); ++s)
            if (last_ev_[s].valid()) pipe_.wait(last_ev_[s], s);
        stats_.draft_rows = chain_.draft_rows();  // the chain's ops are done
        if (ready_) {  // stage 0 is one window ahead: undo it
            pipe_.restore(0, seq_, ready_->slot);
            ready_ = nullptr;
        }
        pipe_.set_n_past(seq_, n_);
    } catch (...) {
        fail_cleanup();
        throw;
    }
}

}  // namespace strata
