// The pipelined verify windows under ThreadSanitizer (built by scripts/tsan.sh): a tiny
// qwen3next model with an MTP head decodes on a two-stage split with --pipeline-windows
// 2, drafts forced so that early windows are both kept and rolled back, in the default
// mode and with the prestage and snapshot variables flipped. Any data race between the
// host, the two stage queues and their thread pools fails the run, as does output that
// differs from plain decoding.
#include <cstdio>
#include <string_view>
#include <vector>

#include "engine/generate.h"
#include "engine/split/split_runner.h"
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
    for (int variant = 0; variant < 3; ++variant) {
        GenerateOptions opt = plain;
        opt.spec_draft = 2;
        PipelineOptions po;
        po.theta = 0;
        po.prestage = variant != 1;
        po.snap_overlap = variant != 2;
        opt.pipeline = po;
        opt.spec_edit_draft = [&](int64_t pos, int k, Draft& d) {
            d.tokens.clear();
            for (int j = 0; j < k && pos + 1 + j - P < static_cast<int64_t>(want.size()); ++j) {
                const int64_t at = pos + 1 + j - P;
                d.tokens.push_back(at % 4 == 3 ? (want[static_cast<size_t>(at)] + 1) % V : want[static_cast<size_t>(at)]);
            }
            d.probs.assign(d.tokens.size(), 1.0f);
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
    return failures == 0 ? 0 : 1;
}
