#include "engine/serve/scheduler.h"
#include "engine/run/warm_up.h"
#include "engine/split/split_runner.h"
#include "engine/sample/constrained.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include <spdlog/spdlog.h>


namespace strata {

using clock = std::chrono::steady_clock;


Scheduler::Scheduler(Runner& runner, const Tokenizer& tok, EngineOptions opt)
    : runner_(runner), tok_(tok), opt_(opt) {
    STRATA_CHECK(opt_.n_parallel >= 1, "n_parallel must be >= 1, got {}", opt_.n_parallel);
    STRATA_CHECK(opt_.queue_limit >= 0, "queue_limit must be >= 0, got {}", opt_.queue_limit);
    STRATA_CHECK(opt_.n_batch >= 1, "n_batch must be >= 1, got {}", opt_.n_batch);
    // Sequences are made once: a finished request resets its sequence, so the KV
    // memory of every slot is reserved up front and never reallocated while serving.
    slots_.resize(static_cast<size_t>(opt_.n_parallel));
    for (Slot& s : slots_) s.seq = runner_.new_sequence();
    STRATA_CHECK(opt_.cache_every >= 0, "cache_every must be >= 0, got {}", opt_.cache_every);
    if (opt_.prompt_cache && opt_.cache_ram > 0) {
        store_ = std::make_unique<PromptStore>(opt_.cache_ram, runner_.kv_bytes_per_pos(), runner_.recurrent_bytes());
        spdlog::info("prompt cache: slots' states kept in up to {:.0f} MiB of host memory{}",
                     static_cast<double>(opt_.cache_ram) / (1 << 20),
                     runner_.model().hp().hybrid() && opt_.cache_every > 0
                         ? fmt::format(", a recurrent checkpoint every {} prompt tokens", opt_.cache_every)
                         : std::string());
    }
    const SpecChoice dflt = choose_spec(-1, opt_.spec_draft, runner_.has_mtp(), SamplingParams{});
    if (dflt.off == SpecOff::NoMtp) {
        spdlog::info("speculative decoding is off: the model has no MTP head");
        said_no_mtp_ = true;
    }
    if (dflt.k > 0)
        spdlog::info("speculative decoding: K={} drafts per window from the MTP head (when a slot decodes alone){}",
                     dflt.k,
                     dflt.adaptive && opt_.spec_timed
                         ? fmt::format("; greedy requests move K within 1..{} by the windows' measured rate",
                                       std::max(kAdaptiveMaxSpecK, dflt.k))
                         : std::string());
    if (stage_pipe_of(runner_))
        spdlog::info("pipelined windows: a slot decoding alone with speculation runs them; batched steps when "
                     "others join");
    if (opt_.warm_up) warm_up();
    thread_ = std::thread([this] { loop(); });
}

void Scheduler::warm_up() {
    std::vector<int> seqs;
    for (const Slot& s : slots_) seqs.push_back(s.seq);
    try {
        const double ms = strata::warm_up(runner_, seqs, tok_.bos() >= 0 ? tok_.bos() : 0);
        spdlog::info("warm-up: one window through {} slot(s) in {:.0f} ms", slots_.size(), ms);
    } catch (const std::exception& ex) {  // the first request meets it again, and fails with it
        spdlog::warn("warm-up window failed: {}", ex.what());
    }
}

Scheduler::~Scheduler() {
    shutdown(true);
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (Slot& s : slots_) runner_.free_sequence(s.seq);
}

std::shared_ptr<RequestStream> Scheduler::submit(Request r) {
    auto stream = std::make_shared<RequestStream>();
    {
        std::lock_guard lk(mu_);
        if (!accepting_) throw EngineError(EngineError::Kind::Unavailable, "the server is shutting down");
        const int64_t free_slots = static_cast<int64_t>(slots_.size()) - active_;
        if (static_cast<int64_t>(queue_.size()) >= free_slots + opt_.queue_limit)
            throw EngineError(EngineError::Kind::Busy,
                              fmt::format("the queue is full ({} requests waiting); retry later", queue_.size()));
        queue_.push_back({std::move(r), stream, clock::now()});
    }
    cv_.notify_all();
    return stream;
}

void Scheduler::shutdown(bool cancel_active) {
    std::deque<Queued> dropped;
    {
        std::lock_guard lk(mu_);
        accepting_ = false;
        cancel_active_ = cancel_active_ || cancel_active;
        dropped.swap(queue_);
    }
    for (Queued& q : dropped) {
        Event e;
        e.kind = Event::Kind::Done;
        e.finish = FinishReason::Cancelled;
        q.stream->push(std::move(e));
    }
    cv_.notify_all();
}

EngineStats Scheduler::stats() const {
    std::lock_guard lk(mu_);
    EngineStats s = stats_;
    const Runner::Stats rs = runner_.runner_stats();
    s.handoff_waits = rs.handoff_waits;
    s.handoff_timeouts = rs.handoff_timeouts;
    s.stream_copies = rs.stream_copies;
    s.stream_bytes = rs.stream_bytes;
    s.prefetch_hits = rs.prefetch_hits;
    s.sync_loads = rs.sync_loads;
    s.stream_wait_ms = rs.stream_wait_ms;
    s.device_peak_bytes = rs.device_peak_bytes;
    if (store_) {  // the scheduler thread changes it: read under mu_ (it locks it to write)
        const PromptStore::Stats c = store_stats_;
        s.cache_ram_bytes = static_cast<int64_t>(c.bytes);
        s.cache_ram_entries = c.entries;
        s.cache_ram_saves = c.saves;
        s.cache_ram_hits = c.loads;
        s.cache_ram_tokens = c.loaded_tokens;
        s.cache_ram_evictions = c.evictions;
    }
    s.expert_rows_host = rs.expert_rows_host;
    s.expert_rows_device = rs.expert_rows_device;
    s.graph_replayed = rs.graph_replayed;
    s.graph_captured = rs.graph_captured;
    s.graph_direct = rs.graph_direct;
    s.queued = static_cast<int64_t>(queue_.size());
    s.active = active_;
    return s;
}

void Scheduler::loop() {
    for (;;) {
        std::vector<Queued> fresh;
        bool cancel_all = false;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return stop_ || active_ > 0 || !queue_.empty(); });
            if (stop_ && active_ == 0 && queue_.empty()) return;
            admit(fresh);
            cancel_all = cancel_active_;
        }
        for (Queued& q : fresh) {
            PromptStore::Match hit;
            Slot& s = pick_slot(q.req.prompt, &hit);
            start_slot(s, q, hit);
        }
        if (cancel_all)
            for (Slot& s : slots_)
                if (s.busy()) s.stream->cancel();
        run_window();
    }
}

void Scheduler::start_slot(Slot& s, Queued& q, const PromptStore::Match& hit) {
    s.spec.reset();  // it refers to the sampler replaced below
    s.policy.reset();
    s.stream = std::move(q.stream);
    s.req = std::move(q.req);
    s.prompt_done = 0;
    s.n_gen = 0;
    s.last = -1;
    s.sampler.emplace(s.req.sampling);
    for (int32_t t : s.req.prompt) s.sampler->accept(t);
    s.matcher.reset();
    if (s.req.grammar) {
        if (!vocab_) vocab_ = TokenVocab::from_tokenizer(tok_);
        s.matcher.emplace(s.req.grammar, vocab_);
    }
    s.detok.emplace(tok_);
    s.stops.emplace(s.req.stop);
    s.pending_lp.clear();
    s.submitted = q.submitted;
    s.started = clock::now();
    s.last_used = ++slot_clock_;

    // The prefix of the prompt the sequence already holds is skipped, or the one the
    // host store puts back. What the slot holds goes to the store first, unless the new
    // prompt goes on from all of it.
    s.reused = reusable(s, s.req.prompt);
    const bool from_store = hit.n > static_cast<int64_t>(s.reused);
    if (store_ && !s.cached.empty() && runner_.n_past(s.seq) == static_cast<int64_t>(s.cached.size()) &&
        (from_store || s.reused < s.cached.size()))
        save_to_store(s, s.cached, s.end_row);
    // The MTP's row at the end of the reused prefix, where the state came with one.
    std::vector<float> carry;
    if (!from_store && s.reused > 0 && s.reused == s.cached.size()) carry = std::move(s.end_row);
    s.end_row.clear();
    try {
        if (from_store) {
            s.reused = 0;
            store_->load(runner_, s.seq, hit);  // resets the sequence when it fails
            s.reused = static_cast<size_t>(hit.n);
            const std::span<const float> row = store_->mtp_row(hit);
            carry.assign(row.begin(), row.end());
            s.checkpoint = 0;  // the slot's device snapshot belonged to its earlier history
            std::lock_guard lk(mu_);
            store_stats_ = store_->stats();
        } else if (s.reused > 0 && s.reused < s.cached.size() && runner_.model().hp().hybrid())
            runner_.restore(s.seq);  // back to the checkpoint: n_past = s.checkpoint
        else if (s.reused > 0)
            runner_.truncate_sequence(s.seq, static_cast<int64_t>(s.reused));
        else if (runner_.n_past(s.seq) > 0)
            runner_.reset_sequence(s.seq);
        STRATA_CHECK(runner_.n_past(s.seq) == static_cast<int64_t>(s.reused), "sequence holds {} positions, not {}",
                     runner_.n_past(s.seq), s.reused);
    } catch (const std::exception& ex) {
        spdlog::error("engine: preparing sequence {} failed: {}", s.seq, ex.what());
        s.reused = 0;
        runner_.reset_sequence(s.seq);
    }
    if (s.reused == 0) s.checkpoint = 0;  // a reset drops the snapshot too
    s.prompt_done = s.reused;
    s.cached = s.req.prompt;
    start_spec(s, s.reused > 0 ? carry : std::vector<float>{});  // after the reuse: its prompt rows start there
    {
        std::lock_guard lk(mu_);
        stats_.prompt_cached_tokens += static_cast<int64_t>(s.reused);
    }
}

void Scheduler::admit(std::vector<Queued>& fresh) {
    int64_t free_slots = static_cast<int64_t>(slots_.size()) - active_;
    while (free_slots > 0 && !queue_.empty()) {
        Queued q = std::move(queue_.front());
        queue_.pop_front();
        if (q.stream->cancelled()) {  // gone before it got a slot
            Event e;
            e.kind = Event::Kind::Done;
            e.finish = FinishReason::Cancelled;
            q.stream->push(std::move(e));
            continue;
        }
        fresh.push_back(std::move(q));
        --free_slots;
        ++active_;
    }
}

void Scheduler::finish(Slot& s, FinishReason why, std::string error, Event::ErrorKind kind) {
    if (why != FinishReason::Error && why != FinishReason::Cancelled) {
        std::string rest = s.stops->push(s.detok->flush());
        rest += s.stops->flush();
        if (!rest.empty() || !s.pending_lp.empty()) {
            Event t;
            t.text = std::move(rest);
            t.logprobs = std::move(s.pending_lp);
            s.stream->push(std::move(t));
        }
    }
    const auto now = clock::now();
    Event e;
    e.kind = Event::Kind::Done;
    e.finish = why;
    e.error = std::move(error);
    e.error_kind = kind;
    e.usage.prompt_tokens = static_cast<int64_t>(s.req.prompt.size());
    e.usage.completion_tokens = s.n_gen;
    e.usage.queue_seconds = seconds_between(s.submitted, s.started);
    e.usage.spec_drafted = s.spec ? s.spec->stats().drafted : 0;
    e.usage.spec_accepted = s.spec ? s.spec->stats().accepted : 0;
    e.usage.cached_tokens = static_cast<int64_t>(s.reused);
    if (s.n_gen > 0) {
        e.usage.ttft_seconds = seconds_between(s.submitted, s.first_token);
        e.usage.prompt_seconds = seconds_between(s.started, s.first_token);
        e.usage.decode_seconds = seconds_between(s.first_token, now);
    }
    s.stream->push(std::move(e));
    s.stream.reset();
    // A speculative request's state is plain decoding's once its decoder finished (a
    // pipelined one undoes a window run ahead); its rollbacks used the device snapshot.
    bool plain = true;
    if (s.spec) {
        if (s.spec_open) {
            try {
                s.spec->finish();
            } catch (const std::exception& ex) {
                spdlog::error("engine: finishing the speculative decoder of sequence {} failed: {}", s.seq, ex.what());
                plain = false;
            }
        }
        s.checkpoint = 0;
    }
    // A request that ended normally leaves its state for the next one to reuse a prefix
    // of; anything else (a failure, a cancellation) is dropped.
    const bool keep = opt_.prompt_cache && plain && (why == FinishReason::Stop || why == FinishReason::Length);
    // The MTP catch-up: its pairs up to the end of what the slot keeps, for a next request
    // that goes on from all of it (the sequence holds no more than the committed tokens).
    s.end_row.clear();
    if (keep && s.spec && s.cached.size() >= static_cast<size_t>(runner_.n_past(s.seq))) {
        try {
            if (!s.spec->settle(s.end_row)) s.end_row.clear();
        } catch (const std::exception& ex) {
            spdlog::warn("engine: feeding the MTP the end of sequence {} failed: {}", s.seq, ex.what());
            s.end_row.clear();
        }
    }
    s.spec.reset();  // a pipelined decoder waits for its stages' ops first
    s.spec_open = false;
    s.policy.reset();
    std::vector<float>().swap(s.prompt_hidden);
    try {
        if (keep) s.cached.resize(std::min(s.cached.size(), static_cast<size_t>(runner_.n_past(s.seq))));
        else runner_.reset_sequence(s.seq);
    } catch (const std::exception& ex) {
        spdlog::error("engine: resetting sequence {} failed: {}", s.seq, ex.what());
    }
    if (!keep) {
        s.cached.clear();
        s.checkpoint = 0;
    }
    std::lock_guard lk(mu_);
    --active_;
}

void Scheduler::run_window() {
    // A slot that decodes alone takes a speculative round (when its request has
    // speculation on and its policy drafts now); otherwise every decoding slot gets one
    // token of a batched window (a policy's probe or pause is one of those). Prompt chunks
    // go into the batched window (alone, after a speculative round).
    Slot* solo = nullptr;
    int decoding = 0, busy = 0;
    for (Slot& s : slots_) {
        if (!s.busy()) continue;
        if (s.stream->cancelled()) {
            finish(s, FinishReason::Cancelled);
            continue;
        }
        ++busy;
        if (s.in_prompt()) continue;
        ++decoding;
        solo = &s;
    }
    // A pipelined round leaves work on the stages, so it runs only while its slot is the
    // only busy one: a request that arrives sends it back to batched steps.
    const bool want = decoding == 1 && solo->spec && solo->policy->next_k() > 0;
    if (want && (!solo->pipelined || busy == 1)) spec_window(*solo);
    else solo = nullptr;
    batch_window(solo);
}

void Scheduler::batch_window(const Slot* skip) {
    // A window: one token for every decoding slot, then prompt chunks of slots still
    // reading their prompt, in slot order, while the window has room (n_batch tokens).
    // Decode tokens come first so a long prompt never stalls the streams in flight.
    // Slots with speculation on also want their hidden rows: the MTP sees every
    // committed pair (SpecDecoder::start, ::advance).
    const size_t E = static_cast<size_t>(runner_.model().hp().n_embd);
    std::vector<Runner::Item>& items = items_;  // reused: no allocation per window
    std::vector<Slot*>& owner = owner_;
    items.clear();
    owner.clear();
    int64_t budget = opt_.n_batch;
    for (Slot& s : slots_)  // a pipelined decoder leaves the stages to this window
        if (s.busy() && &s != skip) close_spec(s);
    for (Slot& s : slots_) {
        if (!s.busy() || s.in_prompt() || &s == skip) continue;
        s.probe_guess.reset();
        if (s.spec && s.policy->probe()) {  // the default's shadow probe (SpecPolicy)
            try {
                s.probe_guess = s.spec->guess();
            } catch (const std::exception& ex) {
                Slot* one[1] = {&s};
                fail_window(ex, one);
                continue;
            }
        }
        items.push_back({s.seq, std::span<const int32_t>(&s.last, 1), false, s.spec ? s.hidden_row.data() : nullptr});
        owner.push_back(&s);
        --budget;
    }
    bool any_prompt = false;
    for (Slot& s : slots_) {
        if (!s.busy() || !s.in_prompt()) continue;
        // The first prompt chunk gets at least one token, so prompts progress even
        // when more slots decode than a window holds.
        const int64_t room = any_prompt ? budget : std::max<int64_t>(budget, 1);
        if (room <= 0) break;
        any_prompt = true;
        const size_t n = chunk_room(s, static_cast<size_t>(room));
        items.push_back({s.seq, std::span<const int32_t>(s.req.prompt).subspan(s.prompt_done, n), false,
                         s.spec ? s.prompt_hidden.data() + (static_cast<int64_t>(s.prompt_done) - s.mtp_base) * E : nullptr});
        owner.push_back(&s);
        budget -= static_cast<int64_t>(n);
    }
    if (items.empty()) return;

    const size_t V = static_cast<size_t>(runner_.model().hp().n_vocab);
    logits_.resize(items.size() * V);
    const auto t0 = clock::now();
    try {
        runner_.eval(items, logits_.data());
    } catch (const std::exception& ex) {
        fail_window(ex, owner);
        return;
    }
    // A window of one decode token is the plain step a speculating slot's policy weighs
    // its windows against (SpecPolicy, "Cost"); with other rows in it, it is not one.
    const double plain_s = items.size() == 1 && items[0].tokens.size() == 1 ? seconds_between(t0, clock::now()) : 0.0;
    int64_t sampled = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        Slot& s = *owner[i];
        if (!s.busy()) continue;  // failed with the engine (fail_window below)
        const bool first = s.in_prompt();
        if (first) {
            s.prompt_done += items[i].tokens.size();
            const bool at_mark = opt_.cache_every > 0 && s.prompt_done % static_cast<size_t>(opt_.cache_every) == 0;
            if (s.in_prompt()) {
                if (at_mark) checkpoint(s);
                continue;
            }
            checkpoint(s);
        }
        ++sampled;
        std::span<float> row(logits_.data() + i * V, V);
        // Both apply the penalties to row in place.
        int32_t t = -1;
        try {
            t = s.matcher ? sample_constrained(*s.sampler, *s.matcher, row) : s.sampler->sample(row);
            if (s.matcher) s.matcher->accept_token(t);
        } catch (const std::exception& ex) {  // the grammar allows no token at all
            finish(s, FinishReason::Error, fmt::format("constrained decoding: {}", ex.what()));
            continue;
        }
        // The policy's plain step (a probe or a pause), before commit may end the request.
        const bool policy_step = !first && s.spec && s.policy->next_k() == 0;
        if (policy_step) {
            s.policy->on_plain(plain_s);
            if (s.probe_guess && s.policy->on_probe(*s.probe_guess == t)) log_pause(s);
        }
        // The decoder learns the token before commit may end the request: the pair it
        // makes is the one a finished request's MTP catch-up holds back (settle).
        if (s.spec) {
            try {
                if (first) {
                    s.spec->start(s.prompt_hidden.data() + (s.mtp_from - s.mtp_base) * static_cast<int64_t>(E),
                                  s.req.prompt, t, s.mtp_from);
                    std::vector<float>().swap(s.prompt_hidden);  // the decoder has its own copy
                } else {
                    // Paused (the default's drafts were not kept): the drafter keeps only the
                    // newest pairs, and the plain step counts toward the pause.
                    s.spec->advance(s.hidden_row.data(), t, /*paused=*/policy_step);
                }
            } catch (const std::exception& ex) {  // advance may run the MTP
                Slot* one[1] = {&s};
                fail_window(ex, one);
                continue;
            }
        }
        commit(s, t, row, runner_.n_past(s.seq));
    }
    std::lock_guard lk(mu_);
    ++stats_.windows;
    stats_.generated_tokens += sampled;
    stats_.busy_seconds += seconds_between(t0, clock::now());
}

bool Scheduler::commit(Slot& s, int32_t t, std::span<const float> row, int64_t n_past) {
    if (s.req.top_logprobs >= 0) s.pending_lp.push_back(token_logprob(tok_, row, t, s.req.top_logprobs));
    s.sampler->accept(t);
    s.cached.push_back(t);  // fed next unless the request ends here (finish trims to n_past)
    if (++s.n_gen == 1) s.first_token = clock::now();
    // ignore_eos does not reach past a grammar's end: once it took the end of generation
    // (the structured text is complete), no token can follow.
    if (tok_.is_eog(t) && (!s.req.ignore_eos || (s.matcher && s.matcher->finished()))) {
        finish(s, FinishReason::Stop);
        return false;
    }
    std::string text = s.stops->push(s.detok->push(t));
    if (!text.empty()) {
        Event e;
        e.text = std::move(text);
        e.logprobs = std::move(s.pending_lp);
        s.pending_lp.clear();
        s.stream->push(std::move(e));
    }
    if (s.stops->stopped()) finish(s, FinishReason::Stop);
    else if (s.req.max_tokens >= 0 && s.n_gen >= s.req.max_tokens) finish(s, FinishReason::Length);
    else if (n_past >= runner_.n_ctx()) finish(s, FinishReason::Length);  // no room to feed t
    else {
        s.last = t;
        return true;
    }
    return false;
}

void Scheduler::fail_window(const std::exception& ex, std::span<Slot* const> owner) {
    if (dynamic_cast<const EngineRestarted*>(&ex)) {
        // The runner rebuilt every sequence's state: everything in flight fails (retryable).
        spdlog::error("engine: {}", ex.what());
        {
            std::lock_guard lk(mu_);  // counted before anyone hears of the restart
            ++stats_.restarts;
        }
        for (Slot& s : slots_)
            if (s.busy()) finish(s, FinishReason::Error, ex.what(), Event::ErrorKind::Restarted);
        return;
    }
    // The window's sequences are in an unknown state: their requests fail, and
    // finish() resets the sequences.
    spdlog::error("engine: window of {} request(s) failed: {}", owner.size(), ex.what());
    const bool handoff = dynamic_cast<const HandoffError*>(&ex) != nullptr;
    for (Slot* s : owner)
        if (s->busy())
            finish(*s, FinishReason::Error, ex.what(), handoff ? Event::ErrorKind::Handoff : Event::ErrorKind::Internal);
}

}  // namespace strata
