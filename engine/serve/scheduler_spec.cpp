// The scheduler's speculative side (docs/server.md "Speculative decoding"): which
// decoder a request gets, a round for the slot decoding alone, and bringing a pipelined
// decoder back to plain decoding's state before anything else uses the runner.
#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "engine/serve/scheduler.h"
#include "engine/speculative/pipeline.h"

namespace strata {

using clock = std::chrono::steady_clock;

void Scheduler::start_spec(Slot& s, std::span<const float> carry) {
    // Speculative decoding, by the rule generate() follows (choose_spec).
    const SpecChoice choice = choose_spec(s.req.spec_draft, opt_.spec_draft, runner_.has_mtp(), s.req.sampling);
    // Under a grammar, verification picks each position's token under it and advances it
    // through the kept drafts (verify_window), so drafts need no rollback of it.
    int k = choice.k;
    if (choice.off == SpecOff::NoMtp && !std::exchange(said_no_mtp_, true))
        spdlog::info("speculative decoding is off: the model has no MTP head (spec_draft ignored)");
    if (choice.off == SpecOff::Penalties && !std::exchange(said_penalties_, true))
        spdlog::info("speculative decoding is off for requests with penalties (repeat, presence or frequency "
                     "penalty with penalty_last_n != 0); they decode plainly (logged once)");
    const bool pipelined = k > 0 && stage_pipe_of(runner_) != nullptr;
    if (pipelined) k = std::min<int>(k, static_cast<int>(StagePipe::kMaxRows) - 1);
    if (k > 0) {
        // Only the default K adapts (SpecPolicy); a K from the request or --spec-draft is
        // honoured. A greedy request's policy weighs the windows' measured cost against
        // its plain steps timed while the slot decoded alone (SpecPolicy, "Cost"), and
        // walks its K by their measured rate ("K"; the decoder is built for the
        // largest), as strata run's does.
        SpecPolicyParams prm;
        prm.timed = opt_.spec_timed;
        prm.k_max = adaptive_k_max(choice, prm.timed, s.req.sampling.greedy());
        prm.pipelined = pipelined;
        prm.window_cost_k1 = spec_cost_k1_;
        SpecOptions so;
        so.k = std::max(k, prm.k_max);
        so.draft_min_p = opt_.spec_draft_min_p;
        so.matcher = s.matcher ? &*s.matcher : nullptr;
        if (opt_.spec_edit_draft) {
            auto edit = opt_.spec_edit_draft;
            std::vector<int32_t> prompt = s.req.prompt;
            so.edit_draft = [edit, prompt](int64_t pos, int k_round, Draft& d) { edit(prompt, pos, k_round, d); };
        }
        if (pipelined)
            s.spec = std::make_unique<PipelinedDecoder>(runner_, s.seq, *s.sampler, so, PipelineOptions::process());
        else
            s.spec = std::make_unique<SpecDecoder>(runner_, s.seq, *s.sampler, so);
        s.pipelined = pipelined;
        s.spec_open = false;
        s.policy.emplace(k, choice.adaptive, prm, s.req.sampling.greedy());
        const size_t E = static_cast<size_t>(runner_.model().hp().n_embd);
        // The rows from the reused prefix on, and the carried one before them: its pair
        // (with the prompt's next token) is the MTP's first.
        const bool carried = s.prompt_done > 0 && carry.size() == E;
        s.mtp_base = static_cast<int64_t>(s.prompt_done) - (carried ? 1 : 0);
        s.mtp_from = s.mtp_base;
        s.prompt_hidden.resize((s.req.prompt.size() - static_cast<size_t>(s.mtp_base)) * E);
        if (carried) std::copy(carry.begin(), carry.end(), s.prompt_hidden.begin());
        s.hidden_row.resize(E);
    }
}

bool Scheduler::close_spec(Slot& s) {
    if (!s.spec_open) return true;
    s.spec_open = false;
    try {
        s.spec->finish();
    } catch (const std::exception& ex) {
        Slot* one[1] = {&s};
        fail_window(ex, one);
        return false;
    }
    return true;
}

void Scheduler::spec_window(Slot& s) {
    // Never more tokens than max_tokens or the context allow: the round drafts at most
    // max_emit - 1 tokens, so its window fits wherever a plain window would.
    // A pipelined decoder tells the runner its length only when it finishes; the sequence
    // holds the prompt and every emitted token but the last either way.
    const int64_t n0 = s.pipelined ? static_cast<int64_t>(s.req.prompt.size()) + s.n_gen - 1 : runner_.n_past(s.seq);
    int64_t max_emit = runner_.n_ctx() - n0;
    if (s.req.max_tokens >= 0) max_emit = std::min(max_emit, s.req.max_tokens - s.n_gen);
    const SpecStats& st = s.spec->stats();
    const int64_t w0 = st.windows, d0 = st.drafted, a0 = st.accepted;
    PipelineStats p0, p1;
    s.spec->pipeline_stats(p0);
    spec_out_.clear();
    const auto t0 = clock::now();
    try {
        s.spec_open = s.pipelined;
        s.spec->step(max_emit, spec_out_, s.policy->next_k());
    } catch (const std::exception& ex) {
        s.spec_open = false;  // the decoder cleaned up after itself
        Slot* one[1] = {&s};
        fail_window(ex, one);
        return;
    }
    const double window_s = seconds_between(t0, clock::now());
    const int64_t windows = st.windows - w0, drafted = st.drafted - d0, accepted = st.accepted - a0;
    s.spec->pipeline_stats(p1);  // read now: commit() may end the request and free the decoder
    // The committed tokens in order, as plain decoding would have produced them one by
    // one: the request may end at any of them (end of generation, a stop string,
    // max_tokens); the rest are dropped with the sequence.
    int64_t used = 0;
    for (size_t i = 0; i < spec_out_.size(); ++i) {
        ++used;
        // The kept drafts are in the grammar already (verify_window); the final token not.
        if (s.matcher && i + 1 == spec_out_.size()) {
            try {
                s.matcher->accept_token(spec_out_[i]);
            } catch (const std::exception& ex) {
                finish(s, FinishReason::Error, fmt::format("constrained decoding: {}", ex.what()));
                break;
            }
        }
        if (!commit(s, spec_out_[i], s.spec->logits(i), n0 + static_cast<int64_t>(i) + 1)) break;
    }
    if (s.busy() && s.policy->on_window(drafted, accepted, window_s, p1.hits > p0.hits)) log_pause(s);
    // What a one-draft window costs on this runner, for the next requests' probes
    // (SpecPolicyParams::window_cost_k1): the device's cost, not the request's.
    if (s.policy)
        if (const double c = s.policy->window_cost(1); c > 0) spec_cost_k1_ = c;
    std::lock_guard lk(mu_);
    stats_.spec_window_cost_k1 = spec_cost_k1_;
    stats_.windows += windows;
    stats_.generated_tokens += used;
    stats_.busy_seconds += seconds_between(t0, clock::now());
    stats_.spec_windows += windows;
    stats_.spec_drafted += drafted;
    stats_.spec_accepted += accepted;
    stats_.pipeline_early += p1.early - p0.early;
    stats_.pipeline_kept += p1.hits - p0.hits;
    stats_.pipeline_rolled_back += p1.misses - p0.misses;
}

void Scheduler::log_pause(const Slot& s) {
    if (std::exchange(said_spec_stopped_, true)) return;
    spdlog::info("speculative decoding paused for a request: its drafts were not kept; it decodes plainly for {} "
                 "tokens, then probes again (the pause doubles while the drafts still are not kept; only the default "
                 "K pauses, an explicit --spec-draft or spec_draft always speculates; logged once)",
                 s.policy->pause_left());
}

}  // namespace strata
