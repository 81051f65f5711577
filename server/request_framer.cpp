#include "server/request_framer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace strata::server {

namespace {

bool is_tchar(unsigned char c) {  // RFC 9110 token characters
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Shown to the client: printable ASCII only, and short.
std::string printable(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 64)) out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
    if (s.size() > 64) out += "...";
    return out;
}

}  // namespace

void RequestFramer::fail(int status, std::string message) {
    f_.state = Frame::State::Failed;
    f_.status = status;
    f_.message = std::move(message);
    f_.keep_alive = false;
}

const Frame& RequestFramer::feed(std::string_view buf) {
    if (f_.state != Frame::State::NeedMore) return f_;
    if (!f_.head_done) {
        // Search only what is new (and the three bytes before it, which may start the
        // blank line), and only up to the head limit.
        const size_t from = scanned_ >= 3 ? scanned_ - 3 : 0;
        const size_t upto = std::min(buf.size(), lim_.max_head);
        const size_t at = buf.substr(0, upto).find("\r\n\r\n", from);
        if (at == std::string_view::npos) {
            // The line ends among the new bytes only: a head that drips in a byte at a
            // time is scanned once, not once per byte.
            const std::string_view fresh = buf.substr(scanned_, upto - scanned_);
            newlines_ += static_cast<size_t>(std::count(fresh.begin(), fresh.end(), '\n'));
            if (!line_ended_) line_ended_ = buf.substr(0, upto).find("\r\n", from) != std::string_view::npos;
            scanned_ = upto;
            if (!line_ended_ && upto > lim_.max_target + 32)
                return fail(414, fmt::format("the request line is over {} bytes", lim_.max_target + 32)), f_;
            if (buf.size() >= lim_.max_head)
                return fail(431, fmt::format("the request head is over the limit of {} bytes", lim_.max_head)), f_;
            if (newlines_ > lim_.max_headers + 1)
                return fail(431, fmt::format("the request has over {} header lines", lim_.max_headers)), f_;
            return f_;
        }
        head_end_ = at + 4;
        parse_head(buf.substr(0, at + 2));  // through the last header line's CRLF
        if (f_.state == Frame::State::Failed) return f_;
        f_.head_done = true;
        pos_ = head_end_;
    }
    body(buf);
    return f_;
}

void RequestFramer::parse_head(std::string_view head) {
    // The request line.
    const size_t eol = head.find("\r\n");
    const std::string_view line = head.substr(0, eol);
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return fail(400, fmt::format("malformed request line '{}'", printable(line)));
    const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = line.substr(sp2 + 1);
    if (method.empty() || !std::all_of(method.begin(), method.end(), [](char c) { return is_tchar(c); }))
        return fail(400, fmt::format("malformed method '{}'", printable(method)));
    if (target.size() > lim_.max_target)
        return fail(414, fmt::format("the request target is over {} bytes", lim_.max_target));
    if (target.empty() || !std::all_of(target.begin(), target.end(),
                                       [](char c) { return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f; }))
        return fail(400, "the request target must be printable ASCII (percent-encode other bytes)");
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
        version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
        return fail(400, fmt::format("malformed HTTP version '{}'", printable(version)));
    if (version != "HTTP/1.1" && version != "HTTP/1.0")
        return fail(505, fmt::format("{} is not supported; use HTTP/1.1", printable(version)));
    const bool http10 = version == "HTTP/1.0";
    f_.method = std::string(method);
    f_.target = std::string(target);
    kept_head_.assign(line);
    kept_head_ += "\r\n";

    // Header lines.
    int n_length = 0, n_te = 0, n_host = 0;
    bool chunked = false, close_token = false, keep_alive_token = false;
    size_t n = 0;
    for (size_t p = eol + 2; p < head.size();) {
        const size_t e = head.find("\r\n", p);
        const std::string_view h = head.substr(p, e - p);
        p = e + 2;
        if (++n > lim_.max_headers) return fail(431, fmt::format("the request has over {} header lines", lim_.max_headers));
        if (h.find('\n') != std::string_view::npos || h.find('\r') != std::string_view::npos)
            return fail(400, "header lines must end with CRLF");
        if (h.empty() || h[0] == ' ' || h[0] == '\t') return fail(400, "folded or space-prefixed header lines are not allowed");
        const size_t colon = h.find(':');
        if (colon == std::string_view::npos) return fail(400, fmt::format("malformed header line '{}'", printable(h)));
        const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
        if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return is_tchar(c); }))
            return fail(400, fmt::format("malformed header name '{}'", printable(name)));
        if (std::any_of(value.begin(), value.end(), [](char c) {
                const auto u = static_cast<unsigned char>(c);
                return (u < 0x20 && c != '\t') || u == 0x7f;
            }))
            return fail(400, fmt::format("header '{}' holds control characters", printable(name)));
        bool keep = true;
        if (iequals(name, "Content-Length")) {
            if (++n_length > 1) return fail(400, "more than one Content-Length header");
            if (value.empty() || value.size() > 18 ||
                !std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
                return fail(400, fmt::format("malformed Content-Length '{}'", printable(value)));
            length_ = std::stoull(std::string(value));
        } else if (iequals(name, "Transfer-Encoding")) {
            if (++n_te > 1) return fail(400, "more than one Transfer-Encoding header");
            if (!iequals(value, "chunked"))
                return fail(501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", printable(value)));
            chunked = true;
        } else if (iequals(name, "Content-Encoding")) {
            if (!iequals(value, "identity"))
                return fail(415, fmt::format("Content-Encoding '{}' is not supported: send the body uncompressed",
                                             printable(value)));
        } else if (iequals(name, "Expect")) {
            if (!iequals(value, "100-continue")) return fail(417, fmt::format("Expect '{}' is not supported", printable(value)));
            f_.expect_continue = true;
            keep = false;  // answered by the listener
        } else if (iequals(name, "Range") || iequals(name, "If-Range")) {
            keep = false;  // ignored (RFC 9110 14.2): API answers are never partial
        } else if (iequals(name, "Host")) {
            if (++n_host > 1) return fail(400, "more than one Host header");
        } else if (iequals(name, "Connection")) {
            // A list of tokens; "close" ends the connection after this request.
            std::string_view rest = value;
            while (!rest.empty()) {
                const size_t comma = rest.find(',');
                const std::string_view tok = trim(rest.substr(0, comma));
                if (iequals(tok, "close")) close_token = true;
                if (iequals(tok, "keep-alive")) keep_alive_token = true;
                rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            }
        }
        if (keep) {
            kept_head_.append(h);
            kept_head_ += "\r\n";
        }
    }
    if (n_length > 0 && chunked) return fail(400, "Content-Length and Transfer-Encoding together are not allowed");
    if (chunked && http10) return fail(400, "Transfer-Encoding is not allowed in HTTP/1.0");
    if (!http10 && n_host == 0) return fail(400, "HTTP/1.1 requests need a Host header");
    if (n_length > 0 && length_ > lim_.max_body)
        return fail(413, fmt::format("the request body is over the limit of {} bytes (--max-body)", lim_.max_body));
    f_.keep_alive = !close_token && (!http10 || keep_alive_token);
    kept_head_ += "\r\n";
    body_ = chunked ? Body::ChunkSize : n_length > 0 ? Body::Length : Body::None;
    // Without either header a request has no body (RFC 9112 6.3).
}

void RequestFramer::body(std::string_view buf) {
    for (;;) {
        switch (body_) {
            case Body::None: return complete(buf, head_end_);
            case Body::Length:
                if (buf.size() - head_end_ < length_) return;
                return complete(buf, head_end_ + static_cast<size_t>(length_));
            case Body::ChunkSize: {
                const size_t e = buf.find("\r\n", pos_);
                if (e == std::string_view::npos) {
                    if (buf.size() - pos_ > 1024) return fail(400, "a chunk-size line is over 1024 bytes");
                    return;
                }
                const std::string_view line = buf.substr(pos_, e - pos_);
                const std::string_view size = line.substr(0, line.find(';'));  // extensions are ignored
                if (size.empty() || size.size() > 15 ||
                    !std::all_of(size.begin(), size.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
                    return fail(400, fmt::format("malformed chunk size '{}'", printable(line)));
                length_ = std::stoull(std::string(size), nullptr, 16);
                if (decoded_ + length_ > lim_.max_body)
                    return fail(413, fmt::format("the request body is over the limit of {} bytes (--max-body)", lim_.max_body));
                decoded_ += length_;
                pos_ = e + 2;
                body_ = length_ == 0 ? Body::LastChunkEnd : Body::ChunkData;
                break;
            }
            case Body::ChunkData:
                if (buf.size() - pos_ < length_) return;
                pos_ += static_cast<size_t>(length_);
                body_ = Body::ChunkEnd;
                break;
            case Body::ChunkEnd:
            case Body::LastChunkEnd: {
                if (buf.size() - pos_ < 2) return;
                if (buf.substr(pos_, 2) != "\r\n")
                    return fail(400, body_ == Body::ChunkEnd ? "a chunk's data must end with CRLF"
                                                             : "chunked trailers are not supported");
                pos_ += 2;
                if (body_ == Body::LastChunkEnd) return complete(buf, pos_);
                body_ = Body::ChunkSize;
                break;
            }
        }
    }
}

void RequestFramer::complete(std::string_view buf, size_t end) {
    f_.state = Frame::State::Complete;
    f_.end = end;
    f_.forward = std::move(kept_head_);
    f_.forward.append(buf.substr(head_end_, end - head_end_));
}

}  // namespace strata::server
