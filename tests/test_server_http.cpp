// The HTTP edges of strata-server through real sockets: hostile request lines, heads
// and bodies, slow clients, overload, and the error shape of every refusal.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "server/api_error.h"
#include "tests/raw_http.h"
#include "tests/server_helpers.h"

using namespace strata;
using namespace strata::test;
using namespace std::chrono_literals;

namespace {

// A well-formed error answer in OpenAI's shape.
void check_error_shape(const RawReply& r, int status, const std::string& type = "invalid_request_error") {
    INFO(r.head << r.body);
    CHECK(r.status == status);
    REQUIRE(r.j.is_object());
    REQUIRE(r.j.contains("error"));
    CHECK(r.j["error"]["message"].is_string());
    CHECK(r.j["error"]["type"] == type);
}

bool alive(const TestServer& s) { return get(s, "/health").status == 200; }

std::string post_raw(const std::string& path, const std::string& body, const std::string& extra = {}) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

}  // namespace

TEST_CASE("http: bytes that are not UTF-8 in the path get a well-formed error and the server lives",
          "[server][http]") {
    TestServer s({.load = false});
    // Percent-encoded: httplib decodes it into the path the error message quotes.
    check_error_shape(raw_exchange(s.port(), "GET /%ff HTTP/1.1\r\nHost: x\r\n\r\n"), 404, "not_found_error");
    check_error_shape(raw_exchange(s.port(), "POST /v1/chat/completions%ff HTTP/1.1\r\nHost: x\r\n"
                                             "Content-Length: 2\r\n\r\n{}"),
                      404, "not_found_error");
    // Raw: refused before routing.
    check_error_shape(raw_exchange(s.port(), "GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    CHECK(get(s, "/health").status == 503);  // still up (loading)
}

TEST_CASE("http: chunked and length-less bodies are bounded by --max-body", "[server][http]") {
    TestServer s({.max_body = 64 << 10});
    // 1 MiB in 4 KiB chunks: refused as soon as the decoded body passes the limit.
    RawConn c(s.port());
    REQUIRE(c.connected());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk = "1000\r\n" + std::string(4096, 'a') + "\r\n";
    for (int i = 0; i < 256 && c.send(chunk); ++i) {
    }
    check_error_shape(read_reply(c), 413);
    // A Content-Length over the limit is refused from the head alone.
    check_error_shape(raw_exchange(s.port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                             "Content-Length: 100000000\r\n\r\n"),
                      413);
    // A POST with neither header has an empty body (RFC 9112): answered at once, not
    // read until the client closes.
    RawConn n(s.port());
    n.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n");
    check_error_shape(read_reply(n, 3000ms), 400);
    // A small chunked body is read and served.
    const std::string body = R"({"prompt":"Hi","max_tokens":2})";
    const RawReply ok = raw_exchange(s.port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                               "\r\n5\r\n" + body.substr(0, 5) + "\r\n" +
                                                   fmt::format("{:x}", body.size() - 5) + "\r\n" + body.substr(5) +
                                                   "\r\n0\r\n\r\n");
    CHECK(ok.status == 200);
    CHECK(alive(s));
}

TEST_CASE("http: the request line and head are bounded", "[server][http]") {
    server::ListenerOptions lo;
    lo.limits.max_head = 16 << 10;
    lo.limits.max_headers = 50;
    TestServer s({.load = false, .listen = lo});
    check_error_shape(raw_exchange(s.port(), "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"), 414);
    check_error_shape(raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(1 << 20, 'b') +
                                                 "\r\n\r\n"),
                      431);
    std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 200; ++i) many += fmt::format("X-H{}: v\r\n", i);
    check_error_shape(raw_exchange(s.port(), many + "\r\n"), 431);
    CHECK(get(s, "/health").status == 503);
}

TEST_CASE("http: a head that drips in is timed out, and /health answers meanwhile", "[server][http][slow]") {
    server::ListenerOptions lo;
    lo.head_timeout = 1500ms;
    TestServer s({.parallel = 1, .queue = 0, .listen = lo});
    std::atomic<bool> stop{false};
    std::vector<std::thread> drips;
    std::atomic<int> timed_out{0};
    for (int i = 0; i < 12; ++i) {
        drips.emplace_back([&] {
            RawConn c(s.port());
            const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            for (size_t k = 0; !stop && c.send(std::string(1, head[k % head.size()])); ++k)
                std::this_thread::sleep_for(100ms);
            if (parse_reply(c.read_all(2000ms)).status == 408) ++timed_out;
        });
    }
    std::this_thread::sleep_for(300ms);
    CHECK(get(s, "/health").status == 200);
    const Reply chat = post(s, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2})");
    CHECK(chat.status == 200);
    for (auto& t : drips) t.join();
    stop = true;
    CHECK(timed_out == 12);
}

TEST_CASE("http: a burst of 64 connections is served without resets", "[server][http]") {
    TestServer s({.load = false});
    std::atomic<int> answered{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 64; ++i)
        ts.emplace_back([&] {
            if (raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status == 503)
                ++answered;
        });
    for (auto& t : ts) t.join();
    CHECK(answered == 64);
}

TEST_CASE("http: framing that smuggles is refused", "[server][http]") {
    TestServer s;
    const std::string body = R"({"prompt":"Hi","max_tokens":1})";
    check_error_shape(raw_exchange(s.port(), post_raw("/v1/completions", body, "Content-Length: 5\r\n")), 400);
    check_error_shape(raw_exchange(s.port(), post_raw("/v1/completions", body, "Transfer-Encoding: chunked\r\n")), 400);
    check_error_shape(raw_exchange(s.port(), "GET /health HTTP/1.1\r\n\r\n"), 400);  // HTTP/1.1 without Host
    check_error_shape(raw_exchange(s.port(), post_raw("/v1/completions", body, "Content-Encoding: gzip\r\n")), 415);
    check_error_shape(raw_exchange(s.port(), "GET /health HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
    CHECK(alive(s));
}

TEST_CASE("http: methods, ranges and keep-alive", "[server][http]") {
    TestServer s;
    // A known route asked with the wrong method: 405 naming the right one.
    const RawReply r = raw_exchange(s.port(), "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n");
    check_error_shape(r, 405);
    CHECK(r.header("Allow") == "POST");
    // Range is ignored: the whole answer, never a part of it.
    const RawReply whole = raw_exchange(s.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nRange: bytes=0-3\r\n\r\n");
    CHECK(whole.status == 200);
    CHECK(whole.j.is_object());
    const RawReply bad_range = raw_exchange(s.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nRange: junk\r\n\r\n");
    CHECK(bad_range.status == 200);
    // Two requests on one connection, the second pipelined behind the first.
    RawConn c(s.port());
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    // Both answers are in by the first read (as on a loaded machine): the reader keeps
    // the second for the next call.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK(read_reply(c).status == 200);
    const RawReply second = read_reply(c);
    CHECK(second.status == 200);
    CHECK(second.j["object"] == "list");
}

TEST_CASE("http: Expect: 100-continue gets its go-ahead", "[server][http]") {
    TestServer s;
    const std::string body = R"({"prompt":"Hi","max_tokens":1})";
    RawConn c(s.port());
    c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n");
    pollfd pf{c.fd(), POLLIN, 0};
    REQUIRE(::poll(&pf, 1, 3000) == 1);
    char buf[64] = {};
    const ssize_t n = ::recv(c.fd(), buf, sizeof buf - 1, 0);
    CHECK(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))) == "HTTP/1.1 100 Continue\r\n\r\n");
    c.send(body);
    CHECK(read_reply(c).status == 200);
}

TEST_CASE("http: a client that half-closes after its request still gets the answer", "[server][http]") {
    TestServer s;
    for (const bool stream : {false, true}) {
        RawConn c(s.port());
        const std::string body = fmt::format(R"({{"prompt":"Hi","max_tokens":8,"ignore_eos":true,"stream":{}}})", stream);
        c.send(post_raw("/v1/completions", body));
        c.shutdown_write();
        const RawReply r = parse_reply(c.read_all(10000ms));
        INFO("stream " << stream << ": " << r.head);
        CHECK(r.status == 200);
        if (!stream) {
            CHECK(r.j["usage"]["completion_tokens"] == 8);
        } else {
            CHECK(r.body.find("[DONE]") != std::string::npos);
        }
    }
}

TEST_CASE("http: a full queue's 503 says when to retry", "[server][http][queue]") {
    TestServer s({.parallel = 1, .queue = 0, .n_ctx = 65536});
    RawConn busy(s.port());
    busy.send(post_raw("/v1/completions", R"({"prompt":"Hi","max_tokens":100000,"ignore_eos":true,"stream":true})"));
    REQUIRE(wait_metric(s, "strata_active_slots", 1));
    const RawReply full = raw_exchange(s.port(), post_raw("/v1/completions", R"({"prompt":"Hi","max_tokens":2})"));
    check_error_shape(full, 503, "unavailable_error");
    CHECK(full.j["error"]["code"] == "queue_full");
    CHECK(full.header("Retry-After") == "1");
}

TEST_CASE("http: a NUL in a key is quoted whole; library internals never reach the client", "[server][http]") {
    TestServer s;
    const Reply r = post(s, "/v1/completions", "{\"prompt\":\"Hi\",\"bad\\u0000key\":1}");
    CHECK(r.status == 400);
    const std::string msg = r.j["error"]["message"];
    CHECK(msg.find(std::string("bad\0key", 7)) != std::string::npos);
    // A json type error, as a handler that reads a field without checking would raise.
    std::exception_ptr ep;
    try {
        (void)nlohmann::json(1).get<std::string>();
    } catch (...) {
        ep = std::current_exception();
    }
    const server::ApiError e = server::to_api_error(ep);
    CHECK(e.status == 400);
    CHECK(e.message.find("json.exception") == std::string::npos);
    CHECK(e.message.find("302") == std::string::npos);
}
