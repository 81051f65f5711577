#include "engine/generate.h"

#include <unistd.h>

#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/core/env.h"
#include "engine/core/error.h"
#include "engine/text/detokenizer.h"

namespace strata {

int64_t effective_context(const HParams& hp, int64_t requested, GgmlType cache_type) {
    if (requested > 0) return requested;
    // The model's context, capped so the KV cache takes at most a quarter of RAM.
    int64_t n_attn = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) n_attn += hp.is_recurrent(il) ? 0 : 1;
    const double per_pos = static_cast<double>(n_attn + hp.n_nextn) *
                           static_cast<double>(row_bytes(cache_type, hp.n_kv()) +
                                               row_bytes(cache_type, hp.n_head_kv * hp.head_dim_v));
    const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    const int64_t cap = per_pos > 0 && ram > 0 ? static_cast<int64_t>(ram / 4 / per_pos) : hp.n_ctx_train;
    return std::max<int64_t>(1, std::min(hp.n_ctx_train, cap));
}

GenerateStats generate(Runner& runner, const Tokenizer& tok, std::span<const int32_t> prompt,
                       const GenerateOptions& opt, const std::function<bool(std::string_view)>& on_text,
                       std::vector<int32_t>* out_tokens) {
    using clock = std::chrono::steady_clock;
    const HParams& hp = runner.model().hp();
    const int64_t n_ctx = runner.n_ctx();
    if (prompt.empty()) fail("the prompt is empty");
    if (static_cast<int64_t>(prompt.size()) >= n_ctx)
        fail("the prompt has {} tokens but the context holds {} (raise -c)", prompt.size(), n_ctx);
    STRATA_CHECK(opt.n_batch > 0, "n_batch must be positive, got {}", opt.n_batch);

    SpecOptions spec_opt;
    const SpecChoice choice = choose_spec(opt.spec_draft, -1, runner.has_mtp(), opt.sampling);
    // The default's K may walk (SpecPolicy, "K"): the decoder is built for the largest.
    SpecPolicyParams policy_params = opt.spec_policy ? *opt.spec_policy : SpecPolicyParams{};
    if (policy_params.k_max == 0)
        policy_params.k_max = adaptive_k_max(choice, policy_params.timed, opt.sampling.greedy());
    policy_params.pipelined = stage_pipe_of(runner) != nullptr;
    spec_opt.k = std::max(choice.k, policy_params.k_max);
    spec_opt.draft_min_p = opt.spec_draft_min_p;
    spec_opt.edit_draft = opt.spec_edit_draft;
    if (choice.off == SpecOff::NoMtp) spdlog::info("speculative decoding is off: the model has no MTP head");
    if (choice.off == SpecOff::Penalties)
        spdlog::info("speculative decoding is off for this request: penalties are on (penalty_last_n = {})",
                     opt.sampling.penalty_last_n);
    const bool spec = spec_opt.k > 0;

    std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
    // Speculation feeds every prompt position's hidden state to the MTP head.
    std::vector<float> prompt_hidden(spec ? prompt.size() * static_cast<size_t>(hp.n_embd) : 0);
    const int seq = runner.new_sequence();
    struct Release {  // the slot is freed however generation ends
        Runner& r;
        int seq;
        ~Release() { r.free_sequence(seq); }
    } release{runner, seq};
    auto eval = [&](std::span<const int32_t> toks, float* hidden_out = nullptr) {
        const Runner::Item item{seq, toks, false, hidden_out};
        runner.eval(std::span<const Runner::Item>(&item, 1), logits.data());
    };
    Sampler sampler(opt.sampling);
    StreamingDetokenizer detok(tok);
    GenerateStats st;
    st.n_prompt = static_cast<int64_t>(prompt.size());

    const auto t0 = clock::now();
    for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(opt.n_batch)) {
        const size_t n = std::min(prompt.size() - i, static_cast<size_t>(opt.n_batch));
        eval(prompt.subspan(i, n), spec ? prompt_hidden.data() + i * static_cast<size_t>(hp.n_embd) : nullptr);
    }
    for (int32_t t : prompt) sampler.accept(t);
    const auto t1 = clock::now();
    st.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

    const int64_t limit = opt.n_predict < 0 ? n_ctx - st.n_prompt : std::min(opt.n_predict, n_ctx - st.n_prompt);
    // Emits one token; false when generation stops (end of generation, or on_text said so).
    auto emit = [&](int32_t t) {
        sampler.accept(t);
        ++st.n_generated;
        if (out_tokens) out_tokens->push_back(t);
        if (tok.is_eog(t)) {
            st.stopped_by_eog = true;
            return false;
        }
        const std::string piece = detok.push(t);
        return piece.empty() || on_text(piece);
    };
    // The speculative loop, serial (SpecDecoder) or pipelined (PipelinedDecoder). The
    // policy (SpecPolicy; only the default K adapts) decides each step: a window with its
    // K, or a plain step, with a shadow probe or paused (the drafter then keeps only the
    // newest pairs). The text is plain decoding's either way.
    bool go = true;  // generation goes on
    std::vector<float> hidden_row(spec ? static_cast<size_t>(hp.n_embd) : 0);
    // Greedy requests weigh a window's measured cost (SpecPolicy, "Cost"): their text
    // cannot depend on it; a sampled request's draws would.
    SpecPolicy policy(std::max(choice.k, 1), choice.adaptive, policy_params, opt.sampling.greedy());
    auto log_pause = [&](int64_t windows) {  // the first pause of a request at info, later ones at debug
        spdlog::log(policy.pauses() == 1 ? spdlog::level::info : spdlog::level::debug,
                    "speculative decoding paused for {} tokens: the default's drafts were not kept ({} windows, "
                    "{} probes so far; it tries again after the pause, which doubles while they still are not)",
                    policy.pause_left(), windows, policy.probes());
    };
    auto speculate = [&](auto& dec, auto&& pause) {
        int32_t last = sampler.sample(logits);
        if (!(go = emit(last)) || limit <= 1) return;
        dec.start(prompt_hidden.data(), prompt, last);
        std::vector<float>().swap(prompt_hidden);  // the MTP has its own copy now
        std::vector<int32_t> toks;
        bool plain = false;  // the last step was a plain one (the pipelined decoder is finished)
        while (go && st.n_generated < limit) {
            const int k = policy.next_k();
            if (k == 0) {  // a plain step (a probe, or paused), its hidden row for the drafter
                if (!plain) pause(dec);
                plain = true;
                const bool probe = policy.probe();
                const int32_t guess = probe ? dec.guess() : -1;
                const int32_t one[1] = {last};
                const auto ts = clock::now();
                eval(one, hidden_row.data());
                last = sampler.sample(logits);
                const double plain_s = std::chrono::duration<double>(clock::now() - ts).count();
                dec.advance(hidden_row.data(), last, /*paused=*/true);
                policy.on_plain(plain_s);
                if (probe && policy.on_probe(guess == last)) log_pause(dec.stats().windows);
                go = emit(last);
                continue;
            }
            plain = false;
            const int64_t d0 = dec.stats().drafted, a0 = dec.stats().accepted;
            PipelineStats p0, p1;
            dec.pipeline_stats(p0);
            toks.clear();
            const auto ts = clock::now();
            dec.step(limit - st.n_generated, toks, k);
            const double window_s = std::chrono::duration<double>(clock::now() - ts).count();
            dec.pipeline_stats(p1);
            if (policy.on_window(dec.stats().drafted - d0, dec.stats().accepted - a0, window_s, p1.hits > p0.hits))
                log_pause(dec.stats().windows);
            for (int32_t t : toks) {
                last = t;
                if (!(go = emit(t))) break;
            }
        }
        st.spec = dec.stats();
        st.spec_k_last = policy.k();
        st.spec_k_moves = policy.k_moves();
        st.spec_pauses = policy.pauses();
        st.spec_plain_steps = policy.plain_steps();
    };
    if (!spec && stage_pipe_of(runner))
        spdlog::info("pipelined windows are off for this request: it decodes without speculation");
    if (spec && limit > 0) {
        st.spec_draft = choice.k;
        if (stage_pipe_of(runner)) {
            PipelinedDecoder dec(runner, seq, sampler, spec_opt,
                                 opt.pipeline ? *opt.pipeline : PipelineOptions::process());
            speculate(dec, [](PipelinedDecoder& d) { d.finish(); });  // plain steps go through Runner::eval
            dec.finish();  // the sequence is now as plain decoding leaves it
            st.pipelined = true;
            st.pipe = dec.pipeline_stats();
        } else {
            SpecDecoder dec(runner, seq, sampler, spec_opt);
            speculate(dec, [](SpecDecoder&) {});
        }
    }
    if (!spec) {
        // Plain decoding from the prompt's logits.
        bool first = true;
        int32_t last = 0;
        while (go && st.n_generated < limit) {
            if (!first) {
                const int32_t one[1] = {last};
                eval(one);
            }
            first = false;
            last = sampler.sample(logits);
            go = emit(last);
        }
    }
    const std::string rest = detok.flush();
    if (!rest.empty()) on_text(rest);
    st.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return st;
}

}  // namespace strata
