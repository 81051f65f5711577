// The pipelined verify windows under ThreadSanitizer (built by scripts/tsan.sh): a tiny
// qwen3next model with an MTP head decodes on a two-stage split with --pipeline-windows
// 2, drafts forced so that early windows are both kept and rolled back, in the default
// mode, with the prestage and snapshot variables flipped, and with steps that start no
// early window (their ops on the host's thread) between ones that do. Any data race between the
// host, the two stage queues and their thread pools fails the run, as does output that
// differs from plain decoding. Then the same under device budgets with every layer
// streamed and the experts on the host (the copy threads and the host's pools); overlap
// mode; last, the host timeout's alarm releasing a serial window's dropped hand-off.
#include <cstdio>
#include <string_view>
#include <vector>

#include "engine/generate.h"
#include "engine/split/split_runner.h"
#include "engine/split/stage_placement.h"
#include "tests/model_helpers.h"

using namespace strata;

int main() {
    std::shared_ptr<const Model> m = Model::load(test::to_file(
        test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7, synth::GdnLayout::Split, /*mtp=*/true)));
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps", false);
    const auto quiet = [](std::string_view) { return true; };

    GenerateOptions plain;
    plain.n_predict = 24;
    plain.spec_draft = 0;
    std::vector<int32_t> want;
    {
        auto local = make_local_runner(m, 1, 96, GgmlType::F16);
        generate(*local, tok, prompt, plain, quiet, &want);
    }

    SplitConfig cfg;
    cfg.pipeline_windows = 2;
    const int64_t n = m->hp().n_layer;
    auto r = make_split_runner(m, plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n),
                                             head_weight_bytes(m->file())),
                               2, 96, GgmlType::F16, cfg);
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int32_t V = static_cast<int32_t>(m->hp().n_vocab);
    int failures = 0;
    for (int variant = 0; variant < 4; ++variant) {
        GenerateOptions opt = plain;
        opt.spec_draft = 2;
        PipelineOptions po;
        po.theta = variant == 3 ? 0.5 : 0;
        po.prestage = variant != 1;
        po.snap_overlap = variant != 2;
        opt.pipeline = po;
        opt.spec_edit_draft = [&](int64_t pos, int k, Draft& d) {
            d.tokens.clear();
            for (int j = 0; j < k && pos + 1 + j - P < static_cast<int64_t>(want.size()); ++j) {
                const int64_t at = pos + 1 + j - P;
                d.tokens.push_back(at % 4 == 3 ? (want[static_cast<size_t>(at)] + 1) % V : want[static_cast<size_t>(at)]);
            }
            // Variant 3: every third position's drafts too unsure for theta 0.5, so the
            // windows after them start no early window and run on the host's thread.
            d.probs.assign(d.tokens.size(), variant == 3 && pos % 3 == 0 ? 0.1f : 1.0f);
        };
        std::vector<int32_t> got;
        const GenerateStats st = generate(*r, tok, prompt, opt, quiet, &got);
        std::printf("variant %d: %lld early windows, %lld kept, %lld rolled back\n", variant,
                    static_cast<long long>(st.pipe.early), static_cast<long long>(st.pipe.hits),
                    static_cast<long long>(st.pipe.misses));
        if (got != want || st.pipe.hits == 0 || st.pipe.misses == 0) {
            std::fprintf(stderr, "variant %d: output or hit/miss counts wrong\n", variant);
            ++failures;
        }
    }
    // The same under device budgets with every layer streamed (the copy threads filling
    // slots while the stages compute) and the experts on the host with a device cache
    // re-ranked every window (the host's own pool beside each stage's).
    {
        synth::ModelConfig c = synth::make_config(synth::Arch::Qwen3Next, synth::Preset::Tiny);
        c.n_layer = 6;  // three layers a stage: streamed through two slots
        c.mtp = true;
        std::shared_ptr<const Model> m6 = Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 7)));
        const int64_t n6 = m6->hp().n_layer;
        std::vector<int32_t> want6;
        {
            auto local = make_local_runner(m6, 1, 96, GgmlType::F16);
            generate(*local, tok, prompt, plain, quiet, &want6);
        }
        SplitConfig sc = cfg;
        sc.stream_layers = true;
        sc.n_cpu_moe = -1;
        sc.moe_cache_bytes = size_t{1} << 20;
        sc.adapt_every = 1;
        sc.max_rows = 16;
        const SplitPlan plan =
            plan_split("cpu:0,cpu:1", "auto", n6, layer_weight_bytes(m6->file(), n6), head_weight_bytes(m6->file()));
        for (size_t s = 0; s < plan.stages.size(); ++s) {
            auto dev = open_device(plan.stages[s].device, 1, -1);
            const PlacementRequest req = stage_request(*m6, dev->ops(), plan.stages[s], s == 0,
                                                       s + 1 == plan.stages.size(), sc, 96, GgmlType::F16);
            sc.budgets[plan.stages[s].device] = budget_for(req, 0, 1);
        }
        auto streamed = make_split_runner(m6, plan, 2, 96, GgmlType::F16, sc);
        GenerateOptions opt = plain;
        opt.spec_draft = 2;
        PipelineOptions po;
        po.theta = 0;
        opt.pipeline = po;
        std::vector<int32_t> got;
        const GenerateStats st = generate(*streamed, tok, prompt, opt, quiet, &got);
        const Runner::Stats rs = streamed->runner_stats();
        std::printf("streamed: %lld early windows, %lld layer copies, %lld expert rows on the device's cache\n",
                    static_cast<long long>(st.pipe.early), static_cast<long long>(rs.stream_copies),
                    static_cast<long long>(rs.expert_rows_device));
        if (got != want6 || rs.stream_copies == 0) {
            std::fprintf(stderr, "streamed: output wrong or nothing streamed\n");
            ++failures;
        }
    }
    // Overlap mode: the later stage queued up front, stage 0 on the caller's thread.
    {
        SplitConfig sc;
        sc.overlap = true;
        auto ov = make_split_runner(m, plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n),
                                                  head_weight_bytes(m->file())),
                                    2, 96, GgmlType::F16, sc);
        for (int k : {0, 2}) {
            GenerateOptions opt = plain;
            opt.spec_draft = k;
            std::vector<int32_t> got;
            generate(*ov, tok, prompt, opt, quiet, &got);
            std::printf("overlap, K=%d: %zu tokens\n", k, got.size());
            if (got != want) {
                std::fprintf(stderr, "overlap, K=%d: output differs from plain decoding\n", k);
                ++failures;
            }
        }
    }
    // Serial windows run each stage on the caller's thread; a dropped hand-off with no
    // wait limit is released by the host timeout's alarm, from its own thread.
    {
        SplitConfig sc;
        sc.wait_ms = 0;
        sc.host_timeout_ms = 300;
        sc.drop_window = 2;
        auto serial = make_split_runner(m, plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n),
                                                      head_weight_bytes(m->file())),
                                        2, 96, GgmlType::F16, sc);
        const int seq = serial->new_sequence();
        const Runner::Item it{seq, prompt, false};
        int restarted = 0;
        for (int w = 0; w < 3; ++w) {
            try {
                serial->eval(std::span<const Runner::Item>(&it, 1), nullptr);
            } catch (const EngineRestarted&) {
                ++restarted;
            }
        }
        std::printf("serial: %d restart(s), %lld positions after\n", restarted,
                    static_cast<long long>(serial->n_past(seq)));
        if (restarted != 1 || serial->n_past(seq) != P) {  // the restart emptied it; window 3 refilled it
            std::fprintf(stderr, "serial: the watchdog did not restart exactly once\n");
            ++failures;
        }
    }
    return failures == 0 ? 0 : 1;
}
