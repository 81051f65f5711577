// The engine over a split runner: a hand-off failure fails only the requests of its
// window (with the hand-off error), and after the host watchdog fires the engine
// serves again.
#include <catch2/catch.hpp>

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
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), EngineOptions{});
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
    Engine e(model, Tokenizer::from_gguf(model->file()), split(model, cfg), EngineOptions{});
    const Outcome a = run(e, 8);
    CHECK(a.finish == FinishReason::Error);
    CHECK(a.kind == Event::ErrorKind::Restarted);
    CHECK_THAT(a.error, Catch::Contains("engine restarted"));
    CHECK(e.stats().restarts == 1);
    const Outcome b = run(e, 8);
    CHECK(b.finish == FinishReason::Length);
    CHECK(b.tokens == 8);
}
