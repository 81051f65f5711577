// strata run: generate text from a prompt on the CPU. Text goes to stdout as it is
// produced; prompt and decode speed go to stderr.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "engine/backend/memory_meter.h"
#include "engine/generate.h"
#include "engine/options.h"
#include "engine/split/plan.h"
#include "engine/text/chat_template.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace strata {

Flags run_flags() {
    return Flags("run", "strata run -m MODEL (-p PROMPT | -f FILE) [-n N] [--temp T] [--seed S] [--chat] [-t N] [-c N]",
                 concat(concat(runner_flags(),
                                         {
                                             {"--prompt", "TEXT", "", "prompt text", "-p"},
                                             {"--file", "FILE", "", "read the prompt from FILE", "-f"},
                                             {"--n-predict", "N", "128", "tokens to generate (-1 = until the context is full)", "-n"},
                                             {"--chat", "", "", "wrap the prompt as a user message with the model's chat template"},
                                             {"--chat-template", "NAME", "", "chat template to use instead of the model's"},
                                             {"--no-think", "", "", "with --chat: ask Qwen3 models to answer without reasoning"},
                                         }),
                             concat(sampling_flags(), spec_flags())));
}

int cmd_run(int argc, char** argv) {
    Flags f = run_flags();
    if (!cli::parse(f, argc, argv)) return 0;
    if (!f.given("--model")) throw UsageError("run: -m MODEL is required");
    if (!f.positional().empty()) throw UsageError(fmt::format("run: unexpected argument '{}'", f.positional()[0]));
    const RunnerOptions ro = runner_options(f);
    GenerateOptions opt;
    opt.n_predict = f.integer("--n-predict");
    opt.n_batch = ro.n_batch;
    opt.sampling = sampling_options(f);
    const SpecFlags sf = spec_options(f);
    opt.spec_draft = sf.draft;
    opt.spec_draft_min_p = sf.draft_min_p;
    std::string text = cli::prompt_from(f);

    std::shared_ptr<const Model> model = Model::load(ro.model_path, ro.mtp_path);
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    bool special = false;
    if (f.on("--chat") || f.given("--chat-template")) {
        const ChatTemplate tmpl = f.given("--chat-template") ? ChatTemplate::from_name(f.str("--chat-template"))
                                                             : ChatTemplate::for_tokenizer(tok);
        const ChatMessage msg{"user", text};
        ChatOptions co;
        if (f.on("--no-think")) co.enable_thinking = false;
        text = tmpl.apply(std::span<const ChatMessage>(&msg, 1), co);
        special = true;  // the template's markers are trusted text
    }
    std::vector<int32_t> prompt = tok.encode(text, special);
    if (tok.add_bos()) prompt.insert(prompt.begin(), tok.bos());

    auto runner = make_runner(model, ro);
    if (!ro.budgets.empty() || ro.n_cpu_moe != 0) fmt::print(stderr, "placement: {}\n", runner->describe());
    const GenerateStats st = generate(*runner, tok, prompt, opt, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
    });
    std::fputc('\n', stdout);
    fmt::print(stderr, "prompt: {} tokens in {:.3f} s ({:.2f} tok/s)\n", st.n_prompt, st.prompt_seconds, st.prompt_tps());
    fmt::print(stderr, "decode: {} tokens in {:.3f} s ({:.2f} tok/s){}\n", st.n_generated, st.decode_seconds,
               st.decode_tps(), st.stopped_by_eog ? ", stopped at end of generation" : "");
    // What a bandwidth-bound decode reads per token (tools/gpu-check.sh takes its % of the
    // device's read bandwidth from this line).
    const HParams& hp = model->hp();
    const double per_token = static_cast<double>(decode_weight_bytes(model->file(), hp.n_layer, hp.n_expert, hp.n_expert_used));
    fmt::print(stderr, "weights: {:.1f} MiB read per decode token ({:.2f} GB/s at this rate)\n", per_token / (1 << 20),
               per_token * st.decode_tps() / 1e9);
    if (st.spec_draft > 0) {
        const SpecStats& s = st.spec;
        std::string per_pos;
        for (size_t i = 0; i < s.drafted_at.size(); ++i)
            per_pos += fmt::format("{}{:.2f}", i ? " " : "", s.acceptance_at(i));
        fmt::print(stderr,
                   "speculative: K={}{}, {} windows, {} drafted, {} accepted ({:.1f}%), per position [{}], "
                   "{:.2f} tokens/window, {} rollbacks, snapshot {:.1f} KiB, paused {} times ({} plain tokens), "
                   "draft vocabulary {}\n",
                   st.spec_draft,
                   st.spec_k_moves > 0 ? fmt::format(" (the default's K ended at {} after {} moves)", st.spec_k_last,
                                                     st.spec_k_moves)
                                       : std::string(),
                   s.windows, s.drafted, s.accepted, 100.0 * s.acceptance(), per_pos,
                   s.tokens_per_window(), s.rollbacks, static_cast<double>(s.snapshot_bytes) / 1024.0,
                   st.spec_pauses, st.spec_plain_steps,
                   s.draft_rows > 0 ? fmt::format("{} of {} ids", s.draft_rows, hp.n_vocab) : std::string("every id"));
        if (st.pipelined) {
            const PipelineStats& p = st.pipe;
            fmt::print(stderr,
                       "pipelined windows: {} early ({} kept, {} rolled back, {} forced, {} cut short), {} below "
                       "theta; stage rollbacks: {} from the kept inputs, {} by replay; second buffer set {:.1f} "
                       "KiB per stage\n",
                       p.early, p.hits, p.misses, p.forced, p.cut, p.below_theta, p.log_rollbacks, p.replays,
                       static_cast<double>(p.buffer_bytes) / 1024.0);
        }
    }
    if (!ro.budgets.empty()) {
        const Runner::Stats rs = runner->runner_stats();
        const int64_t tokens = std::max<int64_t>(st.n_prompt + st.n_generated, 1);
        fmt::print(stderr,
                   "streaming: {} layer copies ({:.1f} MiB, {:.2f} MiB per token), {} prefetched in time, {} copied "
                   "at their turn, {} still in a slot; {:.1f} ms waiting for copies; device peak {:.1f} MiB\n",
                   rs.stream_copies, MemoryMeter::mib(rs.stream_bytes),
                   MemoryMeter::mib(rs.stream_bytes) / static_cast<double>(tokens), rs.prefetch_hits, rs.sync_loads,
                   rs.stream_reused, rs.stream_wait_ms, MemoryMeter::mib(rs.device_peak_bytes));
    }
    if (ro.n_cpu_moe != 0) {
        const Runner::Stats rs = runner->runner_stats();
        const int64_t all = rs.expert_rows_host + rs.expert_rows_device;
        fmt::print(stderr, "host experts: {} expert rows on the host, {} on the device's cache ({:.1f}% hits), {} re-rankings\n",
                   rs.expert_rows_host, rs.expert_rows_device,
                   all > 0 ? 100.0 * static_cast<double>(rs.expert_rows_device) / static_cast<double>(all) : 0.0,
                   rs.expert_reranks);
    }
    {
        const Runner::Stats rs = runner->runner_stats();
        if (rs.graph_direct + rs.graph_captured + rs.graph_replayed > 0)
            fmt::print(stderr, "gpu graphs: {} batches replayed, {} captured, {} launched kernel by kernel\n",
                       rs.graph_replayed, rs.graph_captured, rs.graph_direct);
    }
    if (const std::string p = runner->device_profile(); !p.empty()) fmt::print(stderr, "device profile:\n{}", p);
    return 0;
}

}  // namespace strata
