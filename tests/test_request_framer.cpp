// The request framer alone: where requests end, what it refuses, and that feeding the
// bytes one at a time gives the same frame as feeding them at once.
#include <catch2/catch.hpp>

#include "server/request_framer.h"

using namespace strata::server;

namespace {

Frame frame_all(const std::string& s, FramerLimits lim = {}) {
    RequestFramer f(lim);
    return f.feed(s);
}

Frame frame_bytewise(const std::string& s, FramerLimits lim = {}) {
    RequestFramer f(lim);
    for (size_t i = 1; i <= s.size(); ++i)
        if (f.feed(std::string_view(s).substr(0, i)).state != Frame::State::NeedMore) break;
    return f.frame();
}

}  // namespace

TEST_CASE("framer: Content-Length, chunked and bodiless requests end where they end", "[framer]") {
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    const std::string chunked = "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n";
    for (const std::string& req : {get, post, chunked}) {
        const std::string two = req + get;  // a pipelined request behind it
        for (const Frame& f : {frame_all(two), frame_bytewise(two)}) {
            INFO(req);
            REQUIRE(f.state == Frame::State::Complete);
            CHECK(f.end == req.size());
            CHECK(f.forward == req);
            CHECK(f.keep_alive);
        }
    }
    // A POST without a length has no body: complete at the blank line.
    const Frame nolen = frame_all("POST /x HTTP/1.1\r\nHost: x\r\n\r\n{\"a\":1}");
    REQUIRE(nolen.state == Frame::State::Complete);
    CHECK(nolen.end == std::string("POST /x HTTP/1.1\r\nHost: x\r\n\r\n").size());
    // Incomplete stays incomplete.
    CHECK(frame_all(post.substr(0, post.size() - 1)).state == Frame::State::NeedMore);
    CHECK(frame_all(chunked.substr(0, chunked.size() - 2)).state == Frame::State::NeedMore);
}

TEST_CASE("framer: Expect and Range are taken out, Connection is honoured", "[framer]") {
    const Frame f = frame_all("POST /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nRange: bytes=0-1\r\n"
                              "Connection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nhi");
    REQUIRE(f.state == Frame::State::Complete);
    CHECK(f.expect_continue);
    CHECK(!f.keep_alive);
    CHECK(f.forward == "POST /p HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nhi");
    CHECK(!frame_all("GET / HTTP/1.0\r\n\r\n").keep_alive);
    CHECK(frame_all("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
}

TEST_CASE("framer: refusals carry the status a client should see", "[framer]") {
    FramerLimits lim;
    lim.max_head = 4096;
    lim.max_headers = 10;
    lim.max_target = 1000;
    lim.max_body = 100;
    const std::string host = "Host: x\r\n";
    const std::vector<std::pair<std::string, int>> cases = {
        {"GET /" + std::string(2000, 'a') + " HTTP/1.1\r\n" + host + "\r\n", 414},
        {"GET /" + std::string(5000, 'a'), 414},  // no line end yet, already too long
        {"GET / HTTP/1.1\r\n" + host + "X: " + std::string(5000, 'b'), 431},
        {"GET / HTTP/1.1\r\n" + host + "A: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\nI: 1\r\nJ: 1\r\n\r\n", 431},
        {"GET /\xff HTTP/1.1\r\n" + host + "\r\n", 400},
        {"GET / HTTP/1.1\r\n\r\n", 400},                                     // no Host
        {"GET / HTTP/1.1\r\n" + host + "Host: y\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n" + host + "\r\n", 505},
        {"GET / JUNK/1.1\r\n" + host + "\r\n", 400},
        {"GET  / HTTP/1.1\r\n" + host + "\r\n", 400},
        {"GET / HTTP/1.1\r\n" + host + " folded: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n" + host + "Bad Name: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n" + host + "X: a\x01z\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n" + host + "X: a\nY: b\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400},
        {"POST / HTTP/1.1\r\n" + host + "Content-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip\r\n\r\n", 501},
        {"POST / HTTP/1.1\r\n" + host + "Content-Encoding: gzip\r\nContent-Length: 1\r\n\r\nx", 415},
        {"POST / HTTP/1.1\r\n" + host + "Expect: 200-ok\r\n\r\n", 417},
        {"POST / HTTP/1.1\r\n" + host + "Content-Length: 101\r\n\r\n", 413},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'a') + "\r\n40\r\n", 413},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n0x5\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n2\r\nabXX", 400},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n0\r\nTrailer: x\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n" + std::string(2000, '1'), 400},
    };
    for (const auto& [req, status] : cases) {
        for (const Frame& f : {frame_all(req, lim), frame_bytewise(req, lim)}) {
            INFO(req.substr(0, 120));
            CHECK(f.state == Frame::State::Failed);
            CHECK(f.status == status);
            CHECK(!f.message.empty());
        }
    }
}
