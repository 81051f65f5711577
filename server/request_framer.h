// Finds where one HTTP/1.1 request ends in the bytes read from a connection, and
// checks it against the server's limits before any handler sees it. cpp-httplib
// 0.11.4 (Debian's) buffers a request line or header line of any size, accepts any
// number of headers, enforces the body limit only for Content-Length bodies, reads a
// length-less POST until the client closes, decompresses gzip bodies without a bound
// and applies Range to API answers. The listener frames every request here first, so
// httplib only ever parses a complete request that is within the limits.
//
// Strict where HTTP/1.1 allows a server to be (RFC 9112): CRLF line ends, no folded
// or space-prefixed header lines, one Content-Length or one Transfer-Encoding: chunked
// (never both), no trailers, one Host (required in HTTP/1.1). Pure: no sockets, so it
// is unit-tested and fuzzed on its own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::server {

struct FramerLimits {
    size_t max_head = 64 << 10;    // request line + headers, bytes
    size_t max_headers = 100;      // header lines
    size_t max_target = 8000;      // request-target, bytes (longer: 414)
    size_t max_body = 8u << 20;    // decoded body bytes (larger: 413)
};

// The outcome of framing so far.
struct Frame {
    enum class State { NeedMore, Complete, Failed };
    State state = State::NeedMore;
    // Failed: the status and message the client gets; the connection then closes.
    int status = 0;
    std::string message;
    // Known once the head is complete:
    bool head_done = false;
    std::string method, target;
    bool expect_continue = false;  // the client waits for "100 Continue" before its body
    bool keep_alive = true;        // false: Connection: close, or HTTP/1.0 without keep-alive
    // Complete: bytes [0, end) of the buffer are this request; forward is what httplib
    // parses (the same request without the Expect and Range lines, which the listener
    // handles itself).
    size_t end = 0;
    std::string forward;
};

// Feed it the connection's bytes from the start of the request, again each time more
// arrive (the same buffer, grown); it resumes where it stopped, so a body that comes in
// many pieces is scanned once.
class RequestFramer {
public:
    explicit RequestFramer(FramerLimits limits) : lim_(limits) {}
    const Frame& feed(std::string_view buf);
    const Frame& frame() const { return f_; }
    void reset() { *this = RequestFramer(lim_); }

private:
    enum class Body { None, Length, ChunkSize, ChunkData, ChunkEnd, LastChunkEnd };
    void fail(int status, std::string message);
    void parse_head(std::string_view head);
    void body(std::string_view buf);
    void complete(std::string_view buf, size_t end);

    FramerLimits lim_;
    Frame f_;
    size_t scanned_ = 0;       // head: bytes searched for the blank line
    size_t newlines_ = 0;      // head: line feeds among them
    bool line_ended_ = false;  // head: the request line's CRLF is among them
    size_t head_end_ = 0;      // offset of the body
    std::string kept_head_;    // the head httplib gets
    Body body_ = Body::None;
    uint64_t length_ = 0;      // Content-Length, or the current chunk's size
    uint64_t decoded_ = 0;     // body bytes so far (chunked)
    size_t pos_ = 0;           // body: where parsing resumes
};

}  // namespace strata::server
