// The engine over a split runner: a hand-off failure fails only the requests of its
// window (with the hand-off error), and after the host watchdog fires the engine
// serves again.
#include <catch2/catch.hpp>

#include <future>

#include "engine/engine.h"
#include "engine/split/split_runner.h"
#include "tests/server_helpers.h"

using namespace strata;

namespace {

struct Outcome {
    FinishReason finish;
    Event::ErrorKind kind;
    std::string error;
    int64_t tokens;
};

Outcome run(Engine& e, int max_tokens) {
    Request r;
    r.prompt = {1, 2, 3, 4};
    r.max_tokens = max_tokens;
    auto s = e.submit(std::move(r));
    for (;;) {
        auto ev = s->next(std::chrono::seconds(30));
        REQUIRE(ev);
        if (ev->kind == Event::Kind::Done) return {ev->finish, ev->error_kind, ev->error, ev->usage.completion_tokens};
    }
}

// The drop tests count the request's windows from the runner's first: no warm-up window.
EngineOptions cold() {
    EngineOptions o;
    o.warm_up = false;
    return o;
}

std::unique_ptr<Runner> split(std::shared_ptr<const Model> m, SplitConfig cfg) {
    const int64_t L = m->hp().n_layer;
    const SplitPlan plan = plan_split("cpu:0,cpu:1", "auto", L, layer_weight_bytes(m->file(), L), head_weight_bytes(m->file()));
    return make_split_runner(m, plan, 1, 64, GgmlType::F16, cfg);
}

}  // namespace

TEST_CASE("engine over a split: a dropped hand-off fails its request, the next one succeeds", "[server][split][fault]") {
    auto model = test::server_model(synth::Arch::Qwen3Next);
    SplitConfig cfg;
    cfg.overlap = true;
    cfg.wait_ms = 300;
    cfg.drop_window = 3;
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), cold());
    const Outcome a = run(e, 8);  // windows 1..: the third window's hand-off is dropped
    CHECK(a.finish == FinishReason::Error);
    CHECK(a.kind == Event::ErrorKind::Handoff);
    CHECK_THAT(a.error, Catch::Contains("hand-off failed") && Catch::Contains("STRATA_SPLIT_WAIT_MS=300"));
    const Outcome b = run(e, 8);
    CHECK(b.finish == FinishReason::Length);
    CHECK(b.tokens == 8);
    CHECK(e.stats().handoff_timeouts == 1);
    CHECK(e.stats().handoff_waits > 0);
}

TEST_CASE("engine over a split: the watchdog restarts the engine and serving goes on", "[server][split][fault]") {
    auto model = test::server_model(synth::Arch::Llama);
    SplitConfig cfg;
    cfg.overlap = true;
    cfg.wait_ms = 0;  // only the watchdog can end the stuck wait
    cfg.host_timeout_ms = 300;
    cfg.drop_window = 2;
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), cold());
    const Outcome a = run(e, 8);
    CHECK(a.finish == FinishReason::Error);
    CHECK(a.kind == Event::ErrorKind::Restarted);
    CHECK_THAT(a.error, Catch::Contains("engine restarted"));
    CHECK(e.stats().restarts == 1);
    const Outcome b = run(e, 8);
    CHECK(b.finish == FinishReason::Length);
    CHECK(b.tokens == 8);
}

namespace {

// The text of one request (prompt ids) on an engine; an error fails the test.
std::string text_of(Engine& e, std::vector<int32_t> prompt, int64_t max_tokens, int64_t spec_draft = -1) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.spec_draft = spec_draft;
    auto s = e.submit(std::move(r));
    std::string out;
    for (;;) {
        auto ev = s->next(std::chrono::seconds(30));
        REQUIRE(ev);
        if (ev->kind == Event::Kind::Text) out += ev->text;
        if (ev->kind != Event::Kind::Done) continue;
        REQUIRE(ev->finish == FinishReason::Length);
        REQUIRE(ev->usage.completion_tokens == max_tokens);
        return out;
    }
}

}  // namespace

TEST_CASE("engine over a split: speculative and batched windows give the plain text", "[server][split][spec]") {
    auto model = test::server_model(synth::Arch::Qwen3Next, /*mtp=*/true);
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4}, {9, 8, 7}};
    EngineOptions plain_opt;
    plain_opt.n_parallel = 2;
    plain_opt.spec_draft = 0;
    Engine plain(model, Tokenizer::from_gguf(model->file()), make_local_runner(model, 1, 64, GgmlType::F16), plain_opt);
    std::vector<std::string> want;
    for (const auto& p : prompts) want.push_back(text_of(plain, p, 24));
    SplitConfig cfg;
    cfg.overlap = true;
    EngineOptions opt;
    opt.n_parallel = 2;
    // An explicit K: the default would pause this random MTP head (SpecPolicy) after two probes.
    opt.spec_draft = 3;
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), opt);
    for (size_t i = 0; i < prompts.size(); ++i) CHECK(text_of(e, prompts[i], 24) == want[i]);  // alone: speculative
    CHECK(e.stats().spec_windows > 0);
    CHECK(e.stats().spec_drafted > 0);
    auto a = std::async(std::launch::async, [&] { return text_of(e, prompts[0], 24); });
    auto b = std::async(std::launch::async, [&] { return text_of(e, prompts[1], 24); });
    CHECK(a.get() == want[0]);
    CHECK(b.get() == want[1]);
}

TEST_CASE("engine over a split: a hand-off failure in a speculative step fails only its request", "[server][split][spec][fault]") {
    auto model = test::server_model(synth::Arch::Qwen3Next, /*mtp=*/true);
    SplitConfig cfg;
    cfg.overlap = true;
    cfg.wait_ms = 300;
    cfg.drop_window = 3;  // by the third window the request decodes speculatively
    EngineOptions opt = cold();
    opt.spec_draft = 3;  // explicit: the default would pause this random MTP head (SpecPolicy)
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), opt);
    const Outcome a = run(e, 8);
    CHECK(a.finish == FinishReason::Error);
    CHECK(a.kind == Event::ErrorKind::Handoff);
    const Outcome b = run(e, 8);
    CHECK(b.finish == FinishReason::Length);
    CHECK(b.tokens == 8);
    CHECK(e.stats().spec_windows > 0);
}

TEST_CASE("engine: the warm-up window runs before the first request, is not counted, and changes no text",
          "[server][split][warmup]") {
    // Over a split, so that the warm-up shows in the hand-off count; with an MTP head, so
    // that it runs the MTP step too. Two slots: both warmed, both empty after it.
    auto model = test::server_model(synth::Arch::Qwen3Next, /*mtp=*/true);
    EngineOptions warm, cold;
    warm.n_parallel = cold.n_parallel = 2;
    cold.warm_up = false;
    Engine w(model, Tokenizer::from_gguf(model->file()), split(model, SplitConfig{}), warm);
    Engine c(model, Tokenizer::from_gguf(model->file()), split(model, SplitConfig{}), cold);
    CHECK(w.stats().handoff_waits > 0);  // the warm-up window crossed the hand-off
    CHECK(c.stats().handoff_waits == 0);
    CHECK(w.stats().windows == 0);       // served work only
    CHECK(w.stats().generated_tokens == 0);
    const std::vector<int32_t> prompt = {1, 2, 3, 4};
    const std::string want = text_of(c, prompt, 12);
    // The warm-up changes no output. (A slot it left full would not show here: start_slot
    // resets a sequence that holds positions the new prompt does not reuse.)
    CHECK(text_of(w, prompt, 12) == want);
    CHECK(text_of(w, {1}, 12) == text_of(c, {1}, 12));  // a prompt of the warm-up's own token
}
