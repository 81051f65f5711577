// Pipelined verify windows in the server (--pipeline-windows 2 on a two-stage split,
// docs/server.md "Speculative decoding"): a slot decoding alone runs them, a slot that
// others join falls back to batched steps, and the greedy text, token count and
// logprobs are those of plain decoding on one device, through HTTP.
#include <catch2/catch.hpp>

#include <future>

#include "tests/server_spec_helpers.h"

using namespace strata;
using namespace strata::test;

namespace {

ServerConfig pipelined(std::shared_ptr<const Oracle> o, int parallel = 1) {
    ServerConfig c;
    c.parallel = parallel;
    c.mtp = true;
    c.split = true;
    c.pipeline_windows = 2;
    if (o) c.spec_edit_draft = edit(o);
    return c;
}

std::shared_ptr<Oracle> oracle(const std::vector<std::vector<int32_t>>& prompts, int64_t n, int wrong_every) {
    auto o = std::make_shared<Oracle>();
    for (const auto& p : prompts) o->want[p] = greedy(p, n);
    o->wrong_every = wrong_every;
    o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
    return o;
}

}  // namespace

TEST_CASE("server pipeline: a slot decoding alone runs pipelined windows with the plain text",
          "[server][spec][pipeline]") {
    const auto prompt = ids("Once upon a time there was");
    TestServer plain({.mtp = true});  // one device, no speculation: the reference
    json ref = completion(prompt, 40, 0);
    ref["logprobs"] = 2;
    const Out want = run(plain, ref, false);
    REQUIRE(!want.text.empty());
    const Reply want_lp = post(plain, "/v1/completions", ref.dump());
    REQUIRE(want_lp.status == 200);

    SECTION("the random MTP: early windows rolled back") {
        TestServer s(pipelined(nullptr));
        for (bool stream : {false, true}) {
            INFO("stream " << stream);
            const Out on = run(s, completion(prompt, 40, 3), stream);
            CHECK(on.text == want.text);
            CHECK(on.n == want.n);
            CHECK(on.finish == want.finish);
        }
        CHECK(settled_metric(s, "strata_spec_windows_total") > 0);
    }
    SECTION("forced drafts: early windows kept and rolled back") {
        TestServer s(pipelined(oracle({prompt}, 64, 5)));
        for (int k : {1, 3})
            for (bool stream : {false, true}) {
                INFO("k " << k << " stream " << stream);
                json on = completion(prompt, 40, k);
                on["logprobs"] = 2;
                const Out got = run(s, on, stream);
                CHECK(got.text == want.text);
                CHECK(got.n == want.n);
                CHECK(got.timings["draft_n_accepted"].get<int64_t>() > 0);
            }
        // Logprobs of tokens a pipelined window committed come from its verified rows.
        json on = completion(prompt, 40, 3);
        on["logprobs"] = 2;
        const Reply got = post(s, "/v1/completions", on.dump());
        REQUIRE(got.status == 200);
        CHECK(got.j["choices"][0]["logprobs"] == want_lp.j["choices"][0]["logprobs"]);
        const double early = settled_metric(s, "strata_pipeline_early_windows_total");
        const double kept = metric_of(s, "strata_pipeline_kept_windows_total");
        const double back = metric_of(s, "strata_pipeline_rolled_back_windows_total");
        CHECK(kept > 0);
        CHECK(back > 0);  // every fifth draft is wrong
        CHECK(kept + back == early);
    }
}

TEST_CASE("server pipeline: concurrent requests fall back to batched steps and keep their text",
          "[server][spec][pipeline][batching]") {
    std::string long_text;
    for (int i = 0; i < 6; ++i) long_text += "A longer prompt that spans more tokens than one chunk. ";
    const std::vector<std::vector<int32_t>> prompts = {ids("Once upon a time"), ids("The capital of France"),
                                                       ids(long_text)};
    TestServer plain({.parallel = 3, .mtp = true});
    std::vector<std::string> want;
    for (size_t i = 0; i < prompts.size(); ++i)
        want.push_back(run(plain, completion(prompts[i], 16 + 16 * static_cast<int64_t>(i), 0), false).text);

    TestServer s(pipelined(oracle(prompts, 64, 0), 3));  // drafts always right
    for (int round = 0; round < 2; ++round) {
        std::vector<std::future<Out>> together;
        for (size_t i = 0; i < prompts.size(); ++i)
            together.push_back(std::async(std::launch::async, [&, i] {
                return run(s, completion(prompts[i], 16 + 16 * static_cast<int64_t>(i), 3), i % 2 == 1);
            }));
        for (size_t i = 0; i < prompts.size(); ++i) {
            INFO("round " << round << " request " << i);
            CHECK(together[i].get().text == want[i]);
        }
    }
    // The longest request ends alone: pipelined windows ran, and were kept.
    CHECK(settled_metric(s, "strata_pipeline_kept_windows_total") > 0);
}
