// Speculative decoding in the server (docs/server.md "Speculative decoding"): a slot
// that decodes alone takes MTP-drafted verify windows, a slot that shares the window
// decodes plainly, and the text is the plain greedy text either way: alone, streamed,
// with max_tokens and stop strings ending inside a window, and with 4 concurrent
// streams. The tiny model's MTP has random weights and agrees with the target almost
// never, so most tests force the drafts (EngineOptions::spec_edit_draft) to the true
// continuation to get multi-token windows.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include <algorithm>
#include <future>
#include <map>

#include "engine/generate.h"
#include "engine/split/split_runner.h"
#include "server/options.h"
#include "tests/server_spec_helpers.h"

using namespace strata;
using namespace strata::test;

TEST_CASE("server spec: greedy text is the same with speculation on and off", "[server][spec]") {
    const auto prompt = ids("Once upon a time there was");
    SECTION("the random MTP (drafts rejected)") {
        TestServer s({.mtp = true});
        for (bool stream : {false, true}) {
            INFO("stream " << stream);
            const Out off = run(s, completion(prompt, 40, 0), stream);
            const Out on = run(s, completion(prompt, 40, 3), stream);
            const Out dflt = run(s, completion(prompt, 40), stream);  // --spec-draft -1: K = 3 with an MTP head
            CHECK(!off.text.empty());
            CHECK(on.text == off.text);
            CHECK(dflt.text == off.text);
            CHECK(on.n == off.n);
            CHECK(on.finish == off.finish);
            CHECK(!off.timings.contains("draft_n"));
            CHECK(on.timings["draft_n"].get<int64_t>() > 0);
        }
        const std::string m = get(s, "/metrics").body;
        CHECK(metric(m, "strata_spec_windows_total") > 0);
        CHECK(metric(m, "strata_spec_draft_tokens_total") > 0);
        CHECK(metric(m, "strata_spec_accepted_tokens_total") >= 0);
        CHECK(metric(m, "strata_spec_acceptance_ratio") >= 0);
    }
    SECTION("forced drafts: full and partial acceptances") {
        auto o = std::make_shared<Oracle>();
        o->want[prompt] = greedy(prompt, 64);
        o->wrong_every = 5;
        o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
        TestServer s({.mtp = true, .spec_edit_draft = edit(o)});
        for (int k : {1, 3, 4})
            for (bool stream : {false, true}) {
                INFO("k " << k << " stream " << stream);
                const Out off = run(s, completion(prompt, 48, 0), stream);
                const Out on = run(s, completion(prompt, 48, k), stream);
                CHECK(on.text == off.text);
                CHECK(on.n == off.n);
                CHECK(on.timings["draft_n_accepted"].get<int64_t>() > 0);
            }
        const std::string m = get(s, "/metrics").body;
        const double drafted = metric(m, "strata_spec_draft_tokens_total");
        const double accepted = metric(m, "strata_spec_accepted_tokens_total");
        CHECK(accepted > 0);
        CHECK(accepted < drafted);  // every fifth draft is wrong
        CHECK(metric(m, "strata_spec_acceptance_ratio") == Approx(accepted / drafted).margin(1e-3));
        // Every verify window is a window; with acceptances there are fewer windows than tokens.
        CHECK(metric(m, "strata_spec_windows_total") <= metric(m, "strata_windows_total"));
    }
}

TEST_CASE("server spec: a timed greedy request measures what a window costs, for the next ones", "[server][spec]") {
    // The default K of a greedy request with timing on: its windows' cost in plain steps
    // (SpecPolicy::window_cost, once four plain steps were timed) is kept by the scheduler
    // for the next requests' probes and shown in /metrics; before any such request it is 0.
    const auto prompt = ids("Once upon a time there was");
    auto o = std::make_shared<Oracle>();
    o->want[prompt] = greedy(prompt, 120);
    o->wrong_before = 3;  // the first two probes miss: a pause of 64 plain steps, then windows
    o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
    TestServer s({.mtp = true, .spec_edit_draft = edit(o), .spec_timed = true});
    CHECK(metric(get(s, "/metrics").body, "strata_spec_window_cost_steps") == 0);
    const Out off = run(s, completion(prompt, 120, 0), false);
    CHECK(metric(get(s, "/metrics").body, "strata_spec_window_cost_steps") == 0);  // no windows
    const Out on = run(s, completion(prompt, 120), false);
    CHECK(on.text == off.text);
    CHECK(on.timings["draft_n_accepted"].get<int64_t>() > 0);
    const double cost = metric(get(s, "/metrics").body, "strata_spec_window_cost_steps");
    // window_cost's floor (SpecPolicy::kMinWindowCost): a window of two rows costs a plain
    // step or more, never less
    CHECK(cost >= SpecPolicy::kMinWindowCost);
    CHECK(cost < 50);
}

TEST_CASE("server spec: max_tokens is exact when a window commits several tokens", "[server][spec]") {
    const auto prompt = ids("The capital of France");
    auto o = std::make_shared<Oracle>();
    o->want[prompt] = greedy(prompt, 32);  // drafts always right: windows of k + 1 tokens
    TestServer s({.mtp = true, .spec_edit_draft = edit(o)});
    for (int64_t n = 1; n <= 11; ++n)
        for (bool stream : {false, true}) {
            INFO("max_tokens " << n << " stream " << stream);
            json off = completion(prompt, n, 0), on = completion(prompt, n, 3);
            off["logprobs"] = 2;
            on["logprobs"] = 2;
            const Out a = run(s, off, stream), b = run(s, on, stream);
            CHECK(b.n == n);
            CHECK(a.n == n);
            CHECK(b.text == a.text);
            CHECK(b.finish == "length");
        }
    // Logprobs of the tokens a window committed come from the verify window's rows.
    json off = completion(prompt, 9, 0), on = completion(prompt, 9, 3);
    off["logprobs"] = 3;
    on["logprobs"] = 3;
    const Reply a = post(s, "/v1/completions", off.dump()), b = post(s, "/v1/completions", on.dump());
    REQUIRE(a.status == 200);
    REQUIRE(b.status == 200);
    CHECK(b.j["choices"][0]["logprobs"] == a.j["choices"][0]["logprobs"]);
    CHECK(b.j["choices"][0]["logprobs"]["tokens"].size() == 9);
    CHECK(settled_metric(s, "strata_spec_accepted_tokens_total") > 0);
}

TEST_CASE("server spec: a stop string inside a verify window ends the text there", "[server][spec]") {
    const auto prompt = ids("1 2 3 4");
    const Tokenizer tok = Tokenizer::from_gguf(mtp_model()->file());
    auto o = std::make_shared<Oracle>();
    const std::vector<int32_t> want = greedy(prompt, 40);
    o->want[prompt] = want;  // always right: with K = 3, token 0 comes from the prompt
                             // pass and window w commits tokens 4w+1 .. 4w+4
    TestServer s({.mtp = true, .spec_edit_draft = edit(o)});
    const Out full = run(s, completion(prompt, 40, 0), false);
    // A token in the middle of a window (not its first, not its last) whose text starts
    // a stop string found nowhere earlier. The text before it is what plain decoding
    // of the tokens before it gives (the server's own rendering of partial UTF-8).
    int found = 0;
    for (size_t i = 2; i + 1 < want.size() && found < 3; ++i) {
        if ((i - 1) % 4 == 0 || i % 4 == 0) continue;
        const std::string stop = std::string(tok.piece(want[i]));
        const bool ascii = std::all_of(stop.begin(), stop.end(), [](char c) { return c > 0; });
        if (stop.empty() || !ascii || tok.is_eog(want[i])) continue;
        const std::string before = run(s, completion(prompt, static_cast<int64_t>(i), 0), false).text;
        if (run(s, completion(prompt, static_cast<int64_t>(i) + 1, 0), false).text != before + stop ||
            full.text.find(stop) != before.size())
            continue;
        ++found;
        for (bool stream : {false, true}) {
            INFO("token " << i << " stop '" << stop << "' stream " << stream);
            json off = completion(prompt, 40, 0), on = completion(prompt, 40, 3);
            off["stop"] = stop;
            on["stop"] = stop;
            const Out a = run(s, off, stream), b = run(s, on, stream);
            CHECK(a.text == before);
            CHECK(b.text == before);
            CHECK(b.finish == "stop");
            CHECK(b.n == a.n);
            CHECK(b.n == static_cast<int64_t>(i) + 1);  // the stop token counts, the rest of its window not
        }
    }
    CHECK(found > 0);
    CHECK(settled_metric(s, "strata_spec_accepted_tokens_total") > 0);
}

TEST_CASE("server spec: 4 concurrent streams with speculation give the text each gives alone", "[server][spec][batching]") {
    std::string long_text;
    for (int i = 0; i < 8; ++i) long_text += "A much longer prompt that spans more tokens than a window. ";
    const std::vector<std::vector<int32_t>> prompts = {ids("Once upon a time"), ids("The capital of France"),
                                                       ids("1 2 3 4"), ids(long_text)};
    REQUIRE(prompts[3].size() > 64);  // its chunks share windows with the others' decode tokens
    for (bool forced : {false, true}) {
        auto o = std::make_shared<Oracle>();
        if (forced) {
            for (const auto& p : prompts) o->want[p] = greedy(p, 48);
            o->wrong_every = 5;
            o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
        }
        TestServer s({.parallel = 4, .mtp = true, .spec_edit_draft = edit(o)});
        auto body = [&](size_t i, int k) {
            json j = completion(prompts[i], 24 + 4 * static_cast<int64_t>(i), k);
            j["stream"] = true;
            return j.dump();
        };
        std::vector<std::string> plain, alone;
        for (size_t i = 0; i < prompts.size(); ++i) {
            plain.push_back(sse_text(sse_events(post(s, "/v1/completions", body(i, 0)).body)));
            alone.push_back(sse_text(sse_events(post(s, "/v1/completions", body(i, 3)).body)));
        }
        const double windows0 = metric_of(s, "strata_spec_windows_total");
        std::vector<std::future<std::string>> together;
        for (size_t i = 0; i < prompts.size(); ++i)
            together.push_back(std::async(std::launch::async, [&, i] {
                return sse_text(sse_events(post(s, "/v1/completions", body(i, 3)).body));
            }));
        for (size_t i = 0; i < prompts.size(); ++i) {
            INFO("forced " << forced << " stream " << i);
            CHECK(!plain[i].empty());
            CHECK(alone[i] == plain[i]);
            CHECK(together[i].get() == plain[i]);
        }
        // The longest stream ends alone, so some of its windows were speculative.
        CHECK(settled_metric(s, "strata_spec_windows_total") > windows0);
        if (forced) CHECK(settled_metric(s, "strata_spec_accepted_tokens_total") > 0);
    }
}

TEST_CASE("server spec: a slot switches between batched and speculative windows", "[server][spec][batching]") {
    // A prompt longer than 256 tokens gives the drafter more pending pairs than it holds
    // (SpecDecoder::advance feeds the MTP early) when the slot first decodes in a
    // batched window; a short stream keeps it batched for a while, then it decodes alone.
    std::string text;
    for (int i = 0; i < 110; ++i) text += "word" + std::to_string(i) + " ";
    const auto long_prompt = ids(text), short_prompt = ids("Hi there");
    REQUIRE(long_prompt.size() > 256);
    auto o = std::make_shared<Oracle>();
    o->want[long_prompt] = greedy(long_prompt, 60);
    o->want[short_prompt] = greedy(short_prompt, 60);
    o->wrong_every = 5;
    o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
    TestServer s({.parallel = 2, .mtp = true, .spec_edit_draft = edit(o)});
    const Out a0 = run(s, completion(long_prompt, 60, 0), false);
    const Out b0 = run(s, completion(short_prompt, 40, 0), false);
    for (int round = 0; round < 2; ++round) {
        INFO("round " << round);
        auto a = std::async(std::launch::async, [&] { return run(s, completion(long_prompt, 60, 3), true); });
        auto b = std::async(std::launch::async, [&] { return run(s, completion(short_prompt, 40, 3), true); });
        CHECK(a.get().text == a0.text);
        CHECK(b.get().text == b0.text);
    }
    CHECK(settled_metric(s, "strata_spec_accepted_tokens_total") > 0);
}

TEST_CASE("server spec: --spec-draft sets the default, penalties turn it off", "[server][spec]") {
    const auto prompt = ids("Tell me a story");
    SECTION("--spec-draft 0: off unless the request asks") {
        TestServer s({.mtp = true, .spec_draft = 0});
        const Out plain = run(s, completion(prompt, 20), false);
        CHECK(!plain.timings.contains("draft_n"));
        CHECK(settled_metric(s, "strata_spec_draft_tokens_total") == 0);
        const Out on = run(s, completion(prompt, 20, 2), false);
        CHECK(on.text == plain.text);
        CHECK(on.timings["draft_n"].get<int64_t>() > 0);
        CHECK(settled_metric(s, "strata_spec_draft_tokens_total") > 0);
    }
    SECTION("penalties") {
        TestServer s({.mtp = true});
        json off = completion(prompt, 24, 0), on = completion(prompt, 24, 3);
        for (json* j : {&off, &on}) {
            (*j)["repeat_penalty"] = 1.3;
            (*j)["frequency_penalty"] = 0.5;
        }
        const Out a = run(s, off, false), b = run(s, on, true);
        CHECK(b.text == a.text);
        CHECK(!b.timings.contains("draft_n"));
        CHECK(settled_metric(s, "strata_spec_draft_tokens_total") == 0);
        CHECK(settled_metric(s, "strata_spec_windows_total") == 0);
        // penalty_last_n = 0 turns the penalties off, so speculation stays on.
        on["penalty_last_n"] = 0;
        const Out c = run(s, on, false);
        CHECK(c.timings["draft_n"].get<int64_t>() > 0);
    }
    SECTION("the default pauses for a request whose drafts are never kept") {
        TestServer s({.mtp = true});  // a random MTP head: nothing is accepted
        const Out plain = run(s, completion(prompt, 40, 0), false);
        const Out dflt = run(s, completion(prompt, 40), false);
        CHECK(dflt.text == plain.text);
        // Two probes (plain windows with the drafter's guess) miss, then a pause longer
        // than the request (SpecPolicy): not one verify window.
        REQUIRE(SpecPolicyParams{}.backoff_first > 40);
        CHECK(settled_metric(s, "strata_spec_windows_total") == 0);
        const Out k3 = run(s, completion(prompt, 40, 3), false);  // explicit: all the way
        CHECK(k3.text == plain.text);
        CHECK(settled_metric(s, "strata_spec_windows_total") == k3.n - 1);  // one per token after the first
    }
    SECTION("the default pauses and comes back within a request") {
        // Forced drafts wrong for the first 12 tokens, right after: the default probes,
        // pauses for 64 tokens, probes again and drafts.
        std::vector<int32_t> p2;  // a prompt whose greedy continuation has no end of generation for 120 tokens
        for (int t = 0; t < 30; ++t) p2.push_back(static_cast<int32_t>((t * 7 + 3) % 200 + 10));
        const std::vector<int32_t> want = greedy(p2, 120);
        REQUIRE(want.size() == 120);
        auto o = std::make_shared<Oracle>();
        o->want[p2] = want;
        o->wrong_before = 12;
        o->n_vocab = static_cast<int32_t>(mtp_model()->hp().n_vocab);
        TestServer s({.mtp = true, .spec_edit_draft = edit(o)});
        const Out plain = run(s, completion(p2, 110, 0), false);
        const Out dflt = run(s, completion(p2, 110), true);
        CHECK(dflt.text == plain.text);
        CHECK(dflt.n == plain.n);
        CHECK(settled_metric(s, "strata_spec_windows_total") > 0);
        CHECK(settled_metric(s, "strata_spec_accepted_tokens_total") > 20);
    }
    SECTION("no MTP head: spec_draft is accepted and ignored") {
        TestServer s;
        const Out a = run(s, completion(prompt, 12, 3), false);
        CHECK(a.n == 12);
        CHECK(settled_metric(s, "strata_spec_draft_tokens_total") == 0);
    }
    SECTION("the server's flags") {
        Flags f = server::server_flags();
        const char* argv[] = {"strata-server", "--demo", "--spec-draft", "2", "--spec-draft-min-p", "0.25"};
        f.parse(6, const_cast<char**>(argv));
        const server::ServerOptions so = server::server_options(f);
        CHECK(so.engine.spec_draft == 2);
        CHECK(so.engine.spec_draft_min_p == Approx(0.25));
        Flags g = server::server_flags();
        const char* argv2[] = {"strata-server", "--demo"};
        g.parse(2, const_cast<char**>(argv2));
        CHECK(server::server_options(g).engine.spec_draft == -1);
    }
}

TEST_CASE("server spec: a client that disconnects cancels a speculative stream", "[server][spec][cancel]") {
    TestServer s({.parallel = 1, .queue = 0, .n_ctx = 2048, .mtp = true});
    {
        auto cli = s.client();
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = R"({"prompt":"Tell me everything","max_tokens":100000,"stream":true,"spec_draft":3,"ignore_eos":true})";
        req.set_header("Content-Type", "application/json");
        int seen = 0;
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
            seen += static_cast<int>(std::count(data, data + n, '\n')) / 2;
            return seen < 4;
        };
        httplib::Response res;
        httplib::Error err;
        cli.send(req, res, err);
        CHECK(seen >= 4);
    }
    bool cancelled = false;
    for (int i = 0; i < 200 && !cancelled; ++i) {
        cancelled = metric_of(s, "strata_generations_total{reason=\"cancelled\"}") == 1;
        if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(cancelled);
    for (int i = 0; i < 200 && metric_of(s, "strata_active_slots") != 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(settled_metric(s, "strata_spec_windows_total") > 0);
    const Reply r = post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    CHECK(r.status == 200);
}

TEST_CASE("spec: plain steps between speculative rounds keep the greedy output", "[server][spec]") {
    // What the scheduler does to a slot: plain windows with the hidden row
    // (SpecDecoder::advance) and speculative rounds in any order, from a prompt longer
    // than the drafter's pending limit.
    auto model = mtp_model();
    auto r = make_local_runner(model, 1, kCtx, GgmlType::F16);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(static_cast<int32_t>((i * 7 + 3) % 200 + 10));
    const std::vector<int32_t> want = greedy(prompt, 80);
    REQUIRE(want.size() == 80);
    const int64_t V = model->hp().n_vocab, E = model->hp().n_embd, P = static_cast<int64_t>(prompt.size());
    for (int wrong : {0, 5}) {
        INFO("wrong every " << wrong);
        const int seq = r->new_sequence();
        std::vector<float> logits(static_cast<size_t>(V)), hidden(static_cast<size_t>(P * E)), row(static_cast<size_t>(E));
        const Runner::Item it{seq, prompt, false, hidden.data()};
        r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
        Sampler sampler(SamplingParams{});
        SpecOptions so;
        so.k = 3;
        Oracle o;
        o.want[prompt] = want;
        o.wrong_every = wrong;
        o.n_vocab = static_cast<int32_t>(V);
        so.edit_draft = [&](int64_t pos, int k, Draft& d) { o(prompt, pos, k, d); };
        SpecDecoder dec(*r, seq, sampler, so);
        std::vector<int32_t> got = {sampler.sample(logits)};
        dec.start(hidden.data(), prompt, got[0]);
        for (int step = 0; static_cast<int64_t>(got.size()) < static_cast<int64_t>(want.size()); ++step) {
            if (step % 3 == 2 || step < 2) {  // a plain step
                const Runner::Item one{seq, std::span<const int32_t>(&got.back(), 1), false, row.data()};
                r->eval(std::span<const Runner::Item>(&one, 1), logits.data());
                got.push_back(sampler.sample(logits));
                dec.advance(row.data(), got.back());
            } else {
                dec.step(static_cast<int64_t>(want.size() - got.size()), got);
            }
        }
        CHECK(got == want);
        CHECK(r->n_past(seq) == P + static_cast<int64_t>(got.size()) - 1);
        CHECK(dec.stats().accepted > 0);
        r->free_sequence(seq);
    }
}

namespace {

// Token ids of a request's output (each token's logprob entry carries its id).
std::vector<int32_t> output_ids(Engine& e, const std::vector<int32_t>& prompt, int64_t n, bool sampled,
                                std::shared_ptr<const CompiledGrammar> g, int spec) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = n;
    r.top_logprobs = 0;
    r.grammar = std::move(g);
    r.spec_draft = spec;
    if (sampled) {
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 7;
    }
    const EngineRun out = run_request(e, std::move(r));
    INFO(out.error);
    REQUIRE(out.finish != FinishReason::Error);
    return out.ids;
}

}  // namespace

TEST_CASE("server spec: under a grammar, speculation gives the tokens plain constrained decoding gives", "[server][spec][grammar]") {
    auto model = mtp_model();
    const auto prompt = ids("Once upon a time there was");
    // Letters and spaces, then a period: the random model's own picks are refused often.
    const auto g = CompiledGrammar::compile(Grammar::parse(R"(root ::= [a-z ]+ "." )"));
    auto o = std::make_shared<Oracle>();
    o->wrong_every = 5;
    o->n_vocab = static_cast<int32_t>(model->hp().n_vocab);
    const int64_t L = model->hp().n_layer;
    SplitConfig pipe_cfg;
    pipe_cfg.pipeline_windows = 2;
    for (bool pipelined : {false, true})
    for (bool sampled : {false, true}) {
        INFO((sampled ? "seeded draw" : "greedy") << (pipelined ? ", pipelined windows on two stages" : ", one device"));
        std::unique_ptr<Runner> runner =
            pipelined ? make_split_runner(model, plan_split("cpu:0,cpu:1", "auto", L, layer_weight_bytes(model->file(), L),
                                                            head_weight_bytes(model->file())),
                                          1, kCtx, GgmlType::F16, pipe_cfg)
                      : make_local_runner(model, 2, kCtx, GgmlType::F16);
        Engine e(model, Tokenizer::from_gguf(model->file()), std::move(runner),
                 EngineOptions{.spec_draft = 0, .spec_edit_draft = edit(o)});
        const std::vector<int32_t> plain = output_ids(e, prompt, 40, sampled, g, 0);
        REQUIRE(plain.size() > 4);
        o->want[prompt] = plain;  // the drafts: this continuation, every fifth position wrong
        for (int k : {1, 3}) {
            INFO("k " << k);
            CHECK(output_ids(e, prompt, 40, sampled, g, k) == plain);
        }
        const EngineStats st = e.stats();
        CHECK(st.spec_accepted > 0);
        CHECK(st.spec_accepted < st.spec_drafted);
        o->want.clear();
    }
}
