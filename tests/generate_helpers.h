// Greedy generation with drafts forced to a known continuation, for the determinism
// matrices (tests/test_pipeline.cpp on CPU devices, tests/test_gpu_model.cpp on a GPU).
#pragma once
#include <optional>
#include <vector>

#include "engine/generate.h"

namespace strata::test {

struct Run {
    std::vector<int32_t> out;
    GenerateStats st;
};

// want: the reference continuation; when non-empty the drafts are forced to it (every
// fifth position wrong), so windows are kept whole, cut short and rejected at once.
inline Run gen(Runner& r, const Tokenizer& tok, const std::vector<int32_t>& prompt, int spec, int64_t n,
               const std::vector<int32_t>& want, std::optional<PipelineOptions> popt = std::nullopt) {
    GenerateOptions opt;
    opt.n_predict = n;
    opt.n_batch = 5;
    opt.spec_draft = spec;
    opt.pipeline = popt;
    // The default's policy by acceptance only: the counts the tests check must not
    // depend on how fast this machine runs a window (SpecPolicy, "Cost").
    opt.spec_policy = SpecPolicyParams{};
    opt.spec_policy->timed = false;
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int32_t V = static_cast<int32_t>(r.model().hp().n_vocab);
    if (!want.empty())
        opt.spec_edit_draft = [&want, P, V](int64_t pos, int k, Draft& d) {
            d.tokens.clear();
            for (int j = 0; j < k; ++j) {
                const int64_t at = pos + 1 + j - P;  // the token at position p is want[p - P]
                if (at >= static_cast<int64_t>(want.size())) break;
                int32_t t = want[static_cast<size_t>(at)];
                if (at % 5 == 2) t = (t + 1) % V;
                d.tokens.push_back(t);
            }
            d.probs.assign(d.tokens.size(), 0.9f);
        };
    Run run;
    run.st = generate(r, tok, prompt, opt, [](std::string_view) { return true; }, &run.out);
    return run;
}

}  // namespace strata::test
