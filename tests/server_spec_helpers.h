// Helpers of the server's speculative-decoding tests (test_server_spec.cpp,
// test_server_pipeline.cpp): the plain greedy continuation, an oracle that forces
// drafts, and completions run through HTTP.
#pragma once
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <thread>

#include "engine/generate.h"
#include "engine/split/split_runner.h"
#include "tests/server_helpers.h"

namespace strata::test {

constexpr int64_t kCtx = 512;

inline std::shared_ptr<const Model> mtp_model() { return server_model(synth::Arch::Qwen3Next, true); }

// The greedy continuation of `prompt` (plain decoding, no end-of-generation cut-off
// past n tokens).
inline std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int64_t n) {
    auto model = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    auto runner = make_local_runner(model, 1, kCtx, GgmlType::F16);
    GenerateOptions o;
    o.n_predict = n;
    o.spec_draft = 0;
    std::vector<int32_t> out;
    generate(*runner, tok, prompt, o, [](std::string_view) { return true; }, &out);
    return out;
}

// Forces each round's drafts to the true greedy continuation of the request's prompt
// (when known), with every `wrong_every`-th position wrong (0: never), as
// tests/test_spec.cpp does.
struct Oracle {
    std::map<std::vector<int32_t>, std::vector<int32_t>> want;
    int wrong_every = 0;
    int wrong_before = 0;  // positions before this one are all wrong
    int32_t n_vocab = 0;
    void operator()(std::span<const int32_t> prompt, int64_t pos, int k, Draft& d) const {
        auto it = want.find(std::vector<int32_t>(prompt.begin(), prompt.end()));
        if (it == want.end()) return;
        const int64_t P = static_cast<int64_t>(prompt.size());
        d.tokens.clear();
        for (int j = 0; j < k; ++j) {
            const int64_t at = pos - P + 1 + j;  // the token at position pos is want[pos - P]
            if (at >= static_cast<int64_t>(it->second.size())) break;
            int32_t t = it->second[static_cast<size_t>(at)];
            if ((wrong_every > 0 && at % wrong_every == 2) || at < wrong_before) t = (t + 1) % n_vocab;
            d.tokens.push_back(t);
        }
        d.probs.assign(d.tokens.size(), 1.0f);
    }
};

inline std::function<void(std::span<const int32_t>, int64_t, int, Draft&)> edit(std::shared_ptr<const Oracle> o) {
    return [o](std::span<const int32_t> p, int64_t pos, int k, Draft& d) { (*o)(p, pos, k, d); };
}

inline std::vector<int32_t> ids(const std::string& text) {
    const Tokenizer tok = Tokenizer::from_gguf(mtp_model()->file());
    return tok.encode(text, false);
}

inline json completion(const std::vector<int32_t>& prompt, int64_t max_tokens, int spec_draft = -1) {
    json j = {{"prompt", prompt}, {"max_tokens", max_tokens}};
    if (spec_draft >= 0) j["spec_draft"] = spec_draft;
    return j;
}

// Text, finish reason and completion tokens of a non-streamed or streamed completion.
struct Out {
    std::string text, finish;
    int64_t n = -1;
    json timings;
};

inline Out run(const TestServer& s, json body, bool stream) {
    Out o;
    if (stream) {
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
    }
    const Reply r = post(s, "/v1/completions", body.dump());
    REQUIRE(r.status == 200);
    if (!stream) {
        o.text = r.j["choices"][0]["text"].get<std::string>();
        o.finish = r.j["choices"][0]["finish_reason"].get<std::string>();
        o.n = r.j["usage"]["completion_tokens"].get<int64_t>();
        o.timings = r.j["timings"];
        return o;
    }
    const auto ev = sse_events(r.body);
    REQUIRE(ev.size() >= 3);
    REQUIRE(ev.back() == "[DONE]");
    o.text = sse_text(ev);
    for (const json& e : ev) {
        if (!e.is_object()) continue;
        if (e.contains("choices") && !e["choices"].empty() && !e["choices"][0]["finish_reason"].is_null())
            o.finish = e["choices"][0]["finish_reason"].get<std::string>();
        if (e.contains("usage") && e["usage"].is_object()) o.n = e["usage"]["completion_tokens"].get<int64_t>();
        if (e.contains("timings")) o.timings = e["timings"];
    }
    return o;
}

inline double metric_of(const TestServer& s, const std::string& series) { return metric(get(s, "/metrics").body, series); }

// The scheduler adds a window's counters after the tokens it sends, so a client can read
// /metrics a moment before they land: the value once it has stopped changing.
inline double settled_metric(const TestServer& s, const std::string& series) {
    double v = metric_of(s, series);
    for (int i = 0; i < 50; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const double w = metric_of(s, series);
        if (w == v) return v;
        v = w;
    }
    return v;
}


}  // namespace strata::test
