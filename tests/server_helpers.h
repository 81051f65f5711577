// Helpers of the server tests: an in-process strata-server on an ephemeral loopback
// port with a tiny synthetic model, an httplib client with timeouts, and SSE parsing.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/speculative/mtp_drafter.h"
#include "engine/split/split_runner.h"
#include "server/http_server.h"
#include "tests/model_helpers.h"

namespace strata::test {

using nlohmann::json;

// One tiny model per architecture (and MTP head or not) per process (q8_0, seed 3).
inline std::shared_ptr<const Model> server_model(synth::Arch arch, bool mtp = false) {
    static std::map<std::pair<synth::Arch, bool>, std::shared_ptr<const Model>> cache;
    auto& m = cache[{arch, mtp}];
    if (!m) m = Model::load(to_file(tiny_model(arch, GgmlType::Q8_0, 3, synth::GdnLayout::Split, mtp)));
    return m;
}

// What one request put out, read from its event stream without HTTP: each token's id and
// logprob (the request must set top_logprobs >= 0: each token's entry carries its id),
// the prompt tokens it reused, how it finished.
struct EngineRun {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    int64_t cached = -1;
    FinishReason finish = FinishReason::Error;
    std::string error;
};

inline EngineRun run_request(Engine& e, Request r) {
    auto s = e.submit(std::move(r));
    EngineRun out;
    for (;;) {
        auto ev = s->next(std::chrono::seconds(60));
        REQUIRE(ev);
        for (const TokenLogprob& lp : ev->logprobs) {
            out.ids.push_back(lp.token);
            out.logprobs.push_back(lp.logprob);
        }
        if (ev->kind == Event::Kind::Done) {
            out.cached = ev->usage.cached_tokens;
            out.finish = ev->finish;
            out.error = ev->error;
            return out;
        }
    }
}

struct ServerConfig {
    synth::Arch arch = synth::Arch::Qwen3Next;
    int parallel = 1;
    int queue = 4;
    int64_t n_ctx = 512;
    std::string api_key = {};
    size_t max_body = 8u << 20;
    bool load = true;  // false: the server stays "loading" (no engine)
    server::ListenerOptions listen = {};  // connection limits and timeouts
    bool special_in_content = false;
    std::string chat_template = {};  // by name; empty = the model's
    bool mtp = false;     // the model has an MTP head (qwen3next): speculative decoding works
    int spec_draft = -1;  // --spec-draft
    // EngineOptions::spec_edit_draft (forces drafts: random models accept almost nothing)
    std::function<void(std::span<const int32_t>, int64_t, int, Draft&)> spec_edit_draft = {};
    bool split = false;        // two CPU stages (--devices cpu:0,cpu:1, auto split)
    int pipeline_windows = 0;  // with split: --pipeline-windows
    bool spec_timed = false;   // EngineOptions::spec_timed (off: counts that do not depend on speed)
};

// The runner a test server uses: local, or a two-stage split of CPU devices.
inline std::unique_ptr<Runner> test_runner(std::shared_ptr<const Model> model, const ServerConfig& c) {
    if (!c.split) return make_local_runner(model, 2, c.n_ctx, GgmlType::F16);
    const int64_t L = model->hp().n_layer;
    const SplitPlan plan = plan_split("cpu:0,cpu:1", "auto", L, layer_weight_bytes(model->file(), L),
                                      head_weight_bytes(model->file()));
    SplitConfig cfg;
    cfg.pipeline_windows = c.pipeline_windows;
    return make_split_runner(model, plan, 1, c.n_ctx, GgmlType::F16, cfg);
}

// Serves until destroyed; the destructor stops the listener and the engine.
class TestServer {
public:
    explicit TestServer(const ServerConfig& c = {}) {
        server::ServerOptions o;
        o.host = "127.0.0.1";
        o.port = 0;
        o.api_key = c.api_key;
        o.max_body = c.max_body;
        o.listen = c.listen;
        o.special_in_content = c.special_in_content;
        o.alias = "tiny";
        o.chat_template = c.chat_template;
        o.engine.n_parallel = c.parallel;
        o.engine.queue_limit = c.queue;
        o.engine.n_batch = 64;
        o.engine.spec_draft = c.spec_draft;
        o.engine.spec_timed = c.spec_timed;
        o.engine.spec_edit_draft = c.spec_edit_draft;
        http_ = std::make_unique<server::HttpServer>(o);
        port_ = http_->bind();
        if (c.load) {
            auto model = server_model(c.arch, c.mtp);
            engine_ = std::make_shared<Engine>(model, Tokenizer::from_gguf(model->file()), test_runner(model, c),
                                               o.engine);
            http_->set_engine(engine_);
        }
        thread_ = std::thread([this] { http_->listen(); });
        // listen_after_bind starts accepting at once; wait until it answers.
        for (int i = 0; i < 200; ++i) {
            if (client().Get("/health")) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ~TestServer() {
        if (engine_) engine_->shutdown(true);
        http_->stop();
        if (thread_.joinable()) thread_.join();
    }

    httplib::Client client(int timeout_s = 30) const {
        httplib::Client cli("127.0.0.1", port_);
        cli.set_connection_timeout(5);
        cli.set_read_timeout(timeout_s);
        cli.set_write_timeout(timeout_s);
        return cli;
    }
    int port() const { return port_; }
    Engine& engine() { return *engine_; }
    server::HttpServer& http() { return *http_; }

private:
    std::unique_ptr<server::HttpServer> http_;
    std::shared_ptr<Engine> engine_;
    int port_ = 0;
    std::thread thread_;
};

// A POST with a JSON body; returns status and parsed body (null when not JSON).
struct Reply {
    int status = 0;
    std::string body;
    json j;
};

inline Reply post(const TestServer& s, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
    auto cli = s.client();
    auto r = cli.Post(path.c_str(), headers, body, "application/json");
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.body = r->body;
    out.j = json::parse(r->body, nullptr, false);
    return out;
}

inline Reply get(const TestServer& s, const std::string& path, const httplib::Headers& headers = {}) {
    auto cli = s.client();
    auto r = cli.Get(path.c_str(), headers);
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.body = r->body;
    out.j = json::parse(r->body, nullptr, false);
    return out;
}

// The "data: ..." events of an SSE body; "[DONE]" becomes the string "[DONE]".
inline std::vector<json> sse_events(const std::string& body) {
    std::vector<json> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        const std::string data = body.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
        out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data, nullptr, false));
        if (end == std::string::npos) break;
        pos = end + 2;
    }
    return out;
}

// Concatenated delta content (chat) or text (completions) of SSE events.
inline std::string sse_text(const std::vector<json>& ev) {
    std::string out;
    for (const json& e : ev) {
        if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) continue;
        const json& c = e["choices"][0];
        if (c.contains("delta") && c["delta"].contains("content")) out += c["delta"]["content"].get<std::string>();
        if (c.contains("text")) out += c["text"].get<std::string>();
    }
    return out;
}

// Metric value from the Prometheus text ("name{labels} value"); -1 when absent.
inline double metric(const std::string& text, const std::string& series) {
    const size_t p = text.find("\n" + series + " ");
    if (p == std::string::npos) return -1;
    return std::stod(text.substr(p + series.size() + 2));
}

// Polls /metrics until `series` reaches `value` (or 10 s pass).
inline bool wait_metric(const TestServer& s, const std::string& series, double value) {
    for (int i = 0; i < 200; ++i) {
        if (metric(get(s, "/metrics").body, series) == value) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

}  // namespace strata::test
