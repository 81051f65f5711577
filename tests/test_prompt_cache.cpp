// The slot prompt cache (engine/serve/scheduler.cpp): a request reuses the prefix of its
// prompt that a free slot's sequence already holds, and its tokens and logprobs are
// bit-identical to a cold run's; a recurrent (Gated DeltaNet) state is reused only when
// the prompt goes on from all of it.
#include <catch2/catch.hpp>

#include "engine/engine.h"
#include "engine/split/split_runner.h"
#include "tests/server_helpers.h"

using namespace strata;

namespace {

using Run = test::EngineRun;

Run run(Engine& e, std::vector<int32_t> prompt, int64_t n) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.top_logprobs = 0;  // each token's entry carries its id and logprob
    Run out = test::run_request(e, std::move(r));
    REQUIRE(out.finish == FinishReason::Length);
    return out;
}

std::unique_ptr<Engine> engine(std::shared_ptr<const Model> m, int slots, bool cache) {
    return std::make_unique<Engine>(m, Tokenizer::from_gguf(m->file()), make_local_runner(m, 2, 128, GgmlType::F16),
                                    EngineOptions{.n_parallel = slots, .n_batch = 16, .spec_draft = 0, .prompt_cache = cache});
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

TEST_CASE("prompt cache: a reused prefix gives the cold run's tokens bit for bit", "[server][engine][prompt_cache]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35}) {
        INFO(synth::arch_name(arch));
        auto m = test::server_model(arch);
        const bool recurrent = m->hp().hybrid();
        auto warm = engine(m, 1, true), cold = engine(m, 1, false);
        const std::vector<int32_t> p1 = {1, 17, 42, 5, 99, 3, 250, 7, 11, 64, 2, 8};
        const Run a = run(*warm, p1, 6);
        CHECK(a.cached == 0);
        CHECK(a.ids == run(*cold, p1, 6).ids);
        // The next turn goes on from everything the slot holds: the prompt and the fed
        // answer tokens (all but the last, which was sampled and not fed).
        const std::vector<int32_t> p2 = cat(cat(p1, a.ids), {300, 301, 302});
        const Run b = run(*warm, p2, 6), b_cold = run(*cold, p2, 6);
        CHECK(b.cached == static_cast<int64_t>(p1.size() + a.ids.size() - 1));
        CHECK(b.ids == b_cold.ids);
        CHECK(b.logprobs == b_cold.logprobs);
        CHECK(b_cold.cached == 0);
        // The next turn shares the last prompt but not the answer after it (a thinking
        // model's history drops its reasoning): a recurrent state goes back to the
        // checkpoint taken when that prompt was read.
        const std::vector<int32_t> p4 = cat(p2, {600, 601});
        const Run d = run(*warm, cat(p2, {600, 601}), 6), d_cold = run(*cold, p4, 6);
        CHECK(d.cached == static_cast<int64_t>(p2.size()));
        CHECK(d.ids == d_cold.ids);
        CHECK(d.logprobs == d_cold.logprobs);
        // A prompt that leaves the held tokens before that: an attention-only state goes
        // back to the shared prefix; a recurrent one cannot, and starts over.
        const std::vector<int32_t> p3 = cat(std::vector<int32_t>(p2.begin(), p2.begin() + 10), {400, 401});
        const Run c = run(*warm, p3, 6), c_cold = run(*cold, p3, 6);
        CHECK(c.cached == (recurrent ? 0 : 10));
        CHECK(c.ids == c_cold.ids);
        CHECK(c.logprobs == c_cold.logprobs);
    }
}

TEST_CASE("prompt cache: a request goes to the slot holding its prefix", "[server][engine][prompt_cache]") {
    auto m = test::server_model(synth::Arch::Llama);
    auto e = engine(m, 2, true);
    const std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7, 8}, q = {9, 10, 11, 12, 13, 14};
    CHECK(run(*e, p, 4).cached == 0);
    CHECK(run(*e, q, 4).cached == 0);  // the other slot: the least recently used one
    CHECK(run(*e, cat(p, {20, 21}), 4).cached == 8);
    CHECK(run(*e, cat(q, {22}), 4).cached == 6);
    CHECK(e->stats().prompt_cached_tokens == 14);
    // The whole prompt held: its last token is still evaluated (its logits are needed).
    CHECK(run(*e, p, 4).cached == 7);
}
