// Raw HTTP over loopback for the server tests that send what no HTTP client library
// would (malformed, dripping, oversized, half-closed): a blocking socket with
// timeouts, and a reader of one response.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace strata::test {

class RawConn {
public:
    explicit RawConn(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    ~RawConn() {
        if (fd_ >= 0) ::close(fd_);
    }
    RawConn(const RawConn&) = delete;
    RawConn& operator=(const RawConn&) = delete;

    bool connected() const { return connected_; }
    int fd() const { return fd_; }
    // False when the server closed or reset the connection.
    bool send(const std::string& s) {
        size_t done = 0;
        while (done < s.size()) {
            const ssize_t n = ::send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
            if (n <= 0) return false;
            done += static_cast<size_t>(n);
        }
        return true;
    }
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
    // Everything the server sends until it closes, or until timeout passes quietly.
    std::string read_all(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
        std::string out;
        char buf[65536];
        for (;;) {
            pollfd pf{fd_, POLLIN, 0};
            if (::poll(&pf, 1, static_cast<int>(timeout.count())) <= 0) break;
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) break;
            out.append(buf, static_cast<size_t>(n));
        }
        return out;
    }

    // Bytes read past the last whole response (read_reply): the start of the next one,
    // which a server answering pipelined requests may send in the same segment.
    std::string pending;

private:
    int fd_ = -1;
    bool connected_ = false;
};

// One HTTP response parsed from raw bytes (the first; a 100 Continue is skipped).
struct RawReply {
    int status = 0;           // 0: no well-formed response
    std::string head, body;
    nlohmann::json j;         // the body as JSON, or discarded
    std::string header(const std::string& name) const {
        std::string lower_head = head, lname = name;
        for (auto& c : lower_head) c = static_cast<char>(std::tolower(c));
        for (auto& c : lname) c = static_cast<char>(std::tolower(c));
        const size_t p = lower_head.find("\r\n" + lname + ":");
        if (p == std::string::npos) return {};
        size_t v = p + 3 + lname.size();
        while (v < head.size() && head[v] == ' ') ++v;
        return head.substr(v, head.find("\r\n", v) - v);
    }
};

inline RawReply parse_reply(std::string raw) {
    RawReply r;
    while (raw.starts_with("HTTP/1.1 100 ")) {
        const size_t e = raw.find("\r\n\r\n");
        if (e == std::string::npos) return r;
        raw.erase(0, e + 4);
    }
    const size_t e = raw.find("\r\n\r\n");
    if (!raw.starts_with("HTTP/1.1 ") || e == std::string::npos || raw.size() < 12) return r;
    r.head = raw.substr(0, e + 2);
    r.body = raw.substr(e + 4);
    const std::string len = r.header("Content-Length");
    if (!len.empty() && std::stoul(len) <= r.body.size()) r.body.resize(std::stoul(len));
    r.status = std::stoi(raw.substr(9, 3));
    r.j = nlohmann::json::parse(r.body, nullptr, false);
    return r;
}

// Reads one whole response (by its Content-Length), or what comes until the server
// closes or timeout passes quietly.
inline RawReply read_reply(RawConn& c, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::string raw = std::move(c.pending);
    c.pending.clear();
    // A whole response in raw: returned, and what follows it kept for the next call.
    auto whole = [&](RawReply& out) {
        size_t start = 0;
        while (raw.compare(start, 13, "HTTP/1.1 100 ") == 0) {
            const size_t e = raw.find("\r\n\r\n", start);
            if (e == std::string::npos) return false;
            start = e + 4;
        }
        const size_t e = raw.find("\r\n\r\n", start);
        if (e == std::string::npos) return false;
        const RawReply r = parse_reply(raw.substr(0, e + 4));
        const std::string len = r.header("Content-Length");
        if (!r.status || len.empty()) return false;
        const size_t end = e + 4 + std::stoul(len);
        if (raw.size() < end) return false;
        out = parse_reply(raw.substr(0, end));
        c.pending = raw.substr(end);
        return true;
    };
    char buf[65536];
    RawReply r;
    for (;;) {
        if (whole(r)) return r;
        pollfd pf{c.fd(), POLLIN, 0};
        if (::poll(&pf, 1, static_cast<int>(timeout.count())) <= 0) break;
        const ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
        if (n <= 0) break;
        raw.append(buf, static_cast<size_t>(n));
    }
    return parse_reply(raw);
}

// Sends raw bytes on a new connection and reads the answer.
inline RawReply raw_exchange(int port, const std::string& bytes,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    RawConn c(port);
    if (!c.connected()) return {};
    c.send(bytes);
    return read_reply(c, timeout);
}

}  // namespace strata::test
