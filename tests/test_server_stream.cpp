// strata-server under load: continuous batching gives each stream the text it gets
// alone, a client that disconnects frees its slot, a full queue is 503, and a
// shutdown refuses new work.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>

#include "tests/server_helpers.h"

using namespace strata;
using namespace strata::test;
using namespace std::chrono_literals;

namespace {

// Starts a long stream and closes the connection after `chunks` chunks and once `hold`
// (when given) is false: a test that needs the slot busy for a while releases it itself,
// however fast the model decodes.
void stream_then_disconnect(const TestServer& s, int chunks, const std::atomic<bool>* hold = nullptr) {
    auto cli = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"Tell me everything","max_tokens":100000,"stream":true,"ignore_eos":true})";
    req.set_header("Content-Type", "application/json");
    int seen = 0;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        seen += static_cast<int>(std::count(data, data + n, '\n')) / 2;
        return seen < chunks || (hold && hold->load());  // false: httplib closes the socket
    };
    httplib::Response res;
    httplib::Error err;
    cli.send(req, res, err);
    CHECK(seen >= chunks);
}

}  // namespace

TEST_CASE("server: 4 concurrent greedy streams give the text each gives alone", "[server][batching]") {
    // The MTP model decodes speculatively by default whenever a stream decodes alone
    // (alone here, and at the end of the concurrent run); tests/test_server_spec.cpp
    // has the same check with forced drafts.
    const std::pair<synth::Arch, bool> models[] = {
        {synth::Arch::Qwen3Next, false}, {synth::Arch::Llama, false}, {synth::Arch::Qwen3Next, true}};
    for (auto [arch, mtp] : models) {
        TestServer s({.arch = arch, .parallel = 4, .mtp = mtp});
        // The last prompt is longer than a window (n_batch 64): its chunks share windows
        // with the other streams' decode tokens.
        std::string long_prompt;
        for (int i = 0; i < 8; ++i) long_prompt += "A much longer prompt that spans more tokens than a window. ";
        const std::vector<std::string> prompts = {"Once upon a time", "The capital of France", "1 2 3 4", long_prompt};
        auto body = [&](size_t i) {
            return json{{"prompt", prompts[i]}, {"max_tokens", 24 + 4 * static_cast<int>(i)}, {"stream", true}}.dump();
        };
        std::vector<std::string> alone;
        for (size_t i = 0; i < prompts.size(); ++i)
            alone.push_back(sse_text(sse_events(post(s, "/v1/completions", body(i)).body)));
        std::vector<std::future<std::string>> together;
        for (size_t i = 0; i < prompts.size(); ++i)
            together.push_back(std::async(std::launch::async, [&, i] {
                return sse_text(sse_events(post(s, "/v1/completions", body(i)).body));
            }));
        for (size_t i = 0; i < prompts.size(); ++i) {
            INFO("arch " << synth::arch_name(arch) << " mtp " << mtp << " stream " << i);
            CHECK(together[i].get() == alone[i]);
            CHECK(!alone[i].empty());
        }
    }
}

TEST_CASE("server: a client that disconnects cancels its generation and frees its slot", "[server][cancel]") {
    TestServer s({.parallel = 1, .queue = 0, .n_ctx = 8192});
    stream_then_disconnect(s, 3);
    REQUIRE(wait_metric(s, "strata_generations_total{reason=\"cancelled\"}", 1));
    CHECK(wait_metric(s, "strata_active_slots", 0));
    // The only slot is free again: with no queue, a held slot would mean 503.
    const Reply r = post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    CHECK(r.status == 200);
    const std::string m = get(s, "/metrics").body;
    CHECK(metric(m, "strata_generations_total{reason=\"length\"}") == 1);
}

TEST_CASE("server: a non-streamed client that disconnects cancels its generation too", "[server][cancel]") {
    TestServer s({.parallel = 1, .queue = 0, .n_ctx = 8192});
    // A raw connection: send the request, wait until it decodes, then close.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    const std::string body = R"({"prompt":"Tell me everything","max_tokens":100000,"ignore_eos":true})";
    const std::string msg = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    REQUIRE(::send(fd, msg.data(), msg.size(), 0) == static_cast<ssize_t>(msg.size()));
    REQUIRE(wait_metric(s, "strata_active_slots", 1));
    ::close(fd);
    REQUIRE(wait_metric(s, "strata_generations_total{reason=\"cancelled\"}", 1));
    CHECK(wait_metric(s, "strata_active_slots", 0));
    const Reply r = post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":3})");
    CHECK(r.status == 200);
}

TEST_CASE("server: a full queue is 503, a queued request waits for a slot", "[server][queue]") {
    // The busy stream ends only when the test releases it or its context (64k) fills.
    TestServer s({.parallel = 1, .queue = 1, .n_ctx = 65536});
    std::atomic<bool> hold{true};
    std::thread busy([&] { stream_then_disconnect(s, 1, &hold); });
    REQUIRE(wait_metric(s, "strata_active_slots", 1));
    // One more fits in the queue and waits; the one after is refused.
    auto queued = std::async(std::launch::async, [&] { return post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":2})"); });
    REQUIRE(wait_metric(s, "strata_queue_depth", 1));
    const Reply full = post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
    CHECK(full.status == 503);
    CHECK(full.j["error"]["code"] == "queue_full");
    hold = false;
    busy.join();
    CHECK(queued.get().status == 200);
}

TEST_CASE("server: shutdown refuses new requests with 503 and lets running ones finish", "[server][shutdown]") {
    // The running request ends only at the end of its context (1024), so it is still
    // running when the shutdown comes, however fast the machine.
    TestServer s({.parallel = 1, .n_ctx = 1024});
    auto running = std::async(std::launch::async, [&] {
        return post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":100000,"stream":true,"ignore_eos":true})");
    });
    REQUIRE(wait_metric(s, "strata_active_slots", 1));
    s.engine().shutdown(false);
    const Reply r = post(s, "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
    CHECK(r.status == 503);
    const Reply done = running.get();
    const auto ev = sse_events(done.body);
    REQUIRE(ev.size() >= 2);
    CHECK(ev.back() == "[DONE]");
    CHECK(ev[ev.size() - 2]["choices"][0]["finish_reason"] == "length");
}
