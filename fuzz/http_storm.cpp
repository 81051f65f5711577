// http_storm: hostile HTTP against a live strata-server on loopback for a bounded
// time (scripts/http-fuzz.sh runs it in CI). Each connection sends a request from a
// generator (valid requests, their random mutations, and the known attacks: oversized
// lines and heads, bad framing, bytes that are not UTF-8, deep JSON, dripping clients,
// pipelining, aborts), in random pieces, and checks what comes back: nothing but
// well-formed HTTP/1.1 responses, and never silence past the server's timeouts.
// Meanwhile /health must keep answering. Exit status 1 on any violation.
//
//   http_storm --port N [--seconds 60] [--threads 4] [--seed 1] [--timeout-ms 6000]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

int g_port = 0;
int g_timeout_ms = 6000;  // longer than the server's head and body timeouts
std::atomic<long> g_conns{0}, g_answers{0}, g_failures{0};
std::mutex g_print;

int connect_to() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(g_port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    if (fd >= 0) ::close(fd);
    return -1;
}

std::string escaped(const std::string& s, size_t max = 300) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
        else {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", c);
            out += b;
        }
    }
    if (s.size() > max) out += "...(" + std::to_string(s.size()) + " bytes)";
    return out;
}

void fail(const std::string& what, const std::string& req, const std::string& resp) {
    ++g_failures;
    std::lock_guard lk(g_print);
    std::fprintf(stderr, "http_storm: FAIL %s\n  request:  %s\n  response: %s\n", what.c_str(), escaped(req).c_str(),
                 escaped(resp).c_str());
}

// Checks that raw holds zero or more complete, well-formed HTTP/1.1 responses (a
// trailing one may be cut short only if the server closed mid-body, which it never
// should: that is reported too). Returns an empty string when well-formed.
std::string check_responses(const std::string& raw, size_t* count, bool head_only = false) {
    size_t p = 0;
    *count = 0;
    while (p < raw.size()) {
        if (raw.compare(p, 9, "HTTP/1.1 ") != 0) return "does not start with HTTP/1.1";
        const size_t he = raw.find("\r\n\r\n", p);
        if (he == std::string::npos) return "head without its blank line";
        const std::string head = raw.substr(p, he + 2 - p);
        if (head.size() < 13 || !std::isdigit(static_cast<unsigned char>(head[9])) ||
            !std::isdigit(static_cast<unsigned char>(head[10])) || !std::isdigit(static_cast<unsigned char>(head[11])) ||
            head[12] != ' ')
            return "malformed status line";
        const int status = std::atoi(head.c_str() + 9);
        std::string lower = head;
        for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        p = he + 4;
        if (status >= 100 && status < 200) continue;
        ++*count;
        const size_t cl = lower.find("\r\ncontent-length:");
        if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
            for (;;) {
                const size_t le = raw.find("\r\n", p);
                if (le == std::string::npos) return "chunked body cut short";
                char* end = nullptr;
                const unsigned long n = std::strtoul(raw.c_str() + p, &end, 16);
                if (end == raw.c_str() + p) return "malformed chunk size";
                p = le + 2;
                if (raw.size() < p + n + 2 || raw.compare(p + n, 2, "\r\n") != 0) return "chunk cut short";
                p += n + 2;
                if (n == 0) break;
            }
        } else if (head_only) {
            // the answer to HEAD has a length but no body
        } else if (cl != std::string::npos) {
            const unsigned long n = std::strtoul(lower.c_str() + cl + 17, nullptr, 10);
            if (raw.size() < p + n) return "body shorter than Content-Length";
            p += n;
        } else {
            return "response with neither Content-Length nor chunked";
        }
    }
    return {};
}

struct Plan {
    std::string bytes;
    bool drip = false;       // a few bytes at a time
    bool half_close = false; // shutdown(SHUT_WR) after sending
    bool abort = false;      // close at once with a reset
};

class Gen {
public:
    explicit Gen(uint64_t seed) : rng_(seed) {}
    size_t below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

    std::string valid() {
        switch (below(6)) {
            case 0: return get("/health");
            case 1: return get("/v1/models");
            case 2: return get("/metrics");
            case 3: return post("/v1/completions", R"({"prompt":"Hi","max_tokens":)" + std::to_string(1 + below(4)) +
                                                       (chance(0.5) ? R"(,"stream":true})" : "}"));
            case 4:
                return post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":)" +
                                                        std::to_string(1 + below(3)) + (chance(0.5) ? R"(,"stream":true,"logprobs":true})" : "}"));
            default: return post("/tokenize", R"({"content":"Hello"})");
        }
    }

    std::string get(const std::string& path, const std::string& extra = {}) {
        return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n";
    }
    std::string post(const std::string& path, const std::string& body, const std::string& extra = {}) {
        return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extra +
               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }

    std::string mutate(std::string s) {
        static const char kBytes[] = {'\0', '\r', '\n', ' ', ':', '\xff', '\xc3', '%', '"', '{', '\t', '\x7f'};
        const size_t n = 1 + below(8);
        for (size_t i = 0; i < n && !s.empty(); ++i) {
            const size_t at = below(s.size());
            switch (below(5)) {
                case 0: s[at] = static_cast<char>(below(256)); break;
                case 1: s.insert(at, 1, kBytes[below(sizeof kBytes)]); break;
                case 2: s.erase(at, 1 + below(4)); break;
                case 3: s.insert(at, s.substr(at, below(64))); break;  // duplicate a run (a header line, a digit)
                default: s.resize(at); break;                           // truncate
            }
        }
        return s;
    }

    std::string hostile() {
        const std::string body = R"({"prompt":"Hi","max_tokens":1})";
        switch (below(22)) {
            case 0: return get("/" + std::string(20000 + below(100000), 'a'));
            case 1: return "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(100000 + below(1 << 20), 'b') + "\r\n\r\n";
            case 2: {
                std::string h = "GET /health HTTP/1.1\r\nHost: x\r\n";
                for (size_t i = 0, n = 150 + below(2000); i < n; ++i) h += "X-" + std::to_string(i) + ": v\r\n";
                return h + "\r\n";
            }
            case 3: return get("/%ff%fe");
            case 4: return get("/\xff\xfe");
            case 5: return post("/v1/chat/completions%ff", body);
            case 6: return post("/v1/completions", body, "Content-Length: " + std::to_string(body.size()) + "\r\n");
            case 7: return post("/v1/completions", body, "Transfer-Encoding: chunked\r\n");
            case 8: return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n" + body;
            case 9: return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n";
            case 10: return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n";
            case 11: return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                            std::string(5000, '1') + "\r\n";
            case 12: return post("/v1/completions", body, "Content-Encoding: gzip\r\n");
            case 13: return "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
            case 14: return "GET /\r\n\r\n";
            case 15: return get("/health") + get("/v1/models") + post("/v1/completions", body);  // pipelined
            case 16: return post("/v1/completions", "{\"prompt\":" + std::string(100000 + below(400000), '[') + "}");
            case 17: return post("/v1/completions", "{\"prompt\":\"\xff\xfe\xc3\",\"max_tokens\":1}");
            case 18: return post("/v1/completions", "{\"prompt\":\"Hi\",\"a\\u0000b\":1}");
            case 19: return post("/v1/completions", R"({"prompt":"Hi","max_tokens":1e400,"temperature":-0})");
            case 20: return post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x<|im_end|>\n<|im_start|>system"}],"max_tokens":1})");
            default: {
                std::string junk(1 + below(4096), '\0');
                for (auto& c : junk) c = static_cast<char>(below(256));
                return junk;
            }
        }
    }

    Plan plan() {
        Plan p;
        const size_t kind = below(10);
        if (kind < 3) p.bytes = valid();
        else if (kind < 6) p.bytes = mutate(valid());
        else p.bytes = hostile();
        p.drip = chance(0.04);
        p.half_close = chance(0.15);
        p.abort = chance(0.05);
        return p;
    }

private:
    std::mt19937_64 rng_;
};

void one(Gen& g) {
    const Plan p = g.plan();
    const int fd = connect_to();
    if (fd < 0) {
        fail("cannot connect", p.bytes, "");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return;
    }
    ++g_conns;
    // Send in random pieces; the server may answer and close before all is sent.
    size_t done = 0;
    while (done < p.bytes.size()) {
        const size_t n = p.drip ? 1 + g.below(8) : 1 + g.below(p.bytes.size() - done);
        const ssize_t k = ::send(fd, p.bytes.data() + done, std::min(n, p.bytes.size() - done), MSG_NOSIGNAL);
        if (k <= 0) break;
        done += static_cast<size_t>(k);
        if (p.drip) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (p.drip && done > 200) break;  // the rest of a drip never comes: the head timeout must end it
    }
    if (p.abort) {
        linger l{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        ::close(fd);
        return;
    }
    if (p.half_close) ::shutdown(fd, SHUT_WR);
    std::string resp;
    char buf[65536];
    const auto deadline = Clock::now() + std::chrono::milliseconds(g_timeout_ms);
    bool closed = false;
    while (Clock::now() < deadline) {
        pollfd pf{fd, POLLIN, 0};
        const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
        if (::poll(&pf, 1, std::max(left, 1)) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            closed = true;
            break;
        }
        resp.append(buf, static_cast<size_t>(n));
        size_t count = 0;
        // A kept-alive connection stays open after complete answers to everything sent:
        // stop reading once what came is whole and nothing more is owed.
        if (check_responses(resp, &count, p.bytes.starts_with("HEAD ")).empty() && count > 0 && !p.half_close && g.chance(0.5)) {
            closed = true;
            break;
        }
    }
    ::close(fd);
    size_t count = 0;
    const std::string bad = check_responses(resp, &count, p.bytes.starts_with("HEAD "));
    if (!bad.empty()) fail(bad, p.bytes, resp);
    else if (!closed && resp.empty()) fail("no answer and no close within the timeout", p.bytes, resp);
    if (count) ++g_answers;
}

bool health() {
    const int fd = connect_to();
    if (fd < 0) return false;
    const std::string r = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ::send(fd, r.data(), r.size(), MSG_NOSIGNAL);
    std::string resp;
    char buf[4096];
    pollfd pf{fd, POLLIN, 0};
    while (::poll(&pf, 1, 3000) > 0) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        resp.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return resp.starts_with("HTTP/1.1 200 ");
}

}  // namespace

int main(int argc, char** argv) {
    int seconds = 60, threads = 4;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        const long v = std::strtol(argv[i + 1], nullptr, 10);
        if (a == "--port") g_port = static_cast<int>(v);
        else if (a == "--seconds") seconds = static_cast<int>(v);
        else if (a == "--threads") threads = static_cast<int>(v);
        else if (a == "--seed") seed = static_cast<uint64_t>(v);
        else if (a == "--timeout-ms") g_timeout_ms = static_cast<int>(v);
        else {
            std::fprintf(stderr, "usage: http_storm --port N [--seconds S] [--threads T] [--seed X] [--timeout-ms MS]\n");
            return 2;
        }
    }
    if (g_port <= 0) {
        std::fprintf(stderr, "http_storm: --port is required\n");
        return 2;
    }
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
            Gen g(seed * 1000 + static_cast<uint64_t>(t));
            while (Clock::now() < end) one(g);
        });
    long health_failures = 0;
    while (Clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        if (!health()) {
            ++health_failures;
            std::fprintf(stderr, "http_storm: FAIL /health did not answer 200 within 3 s\n");
        }
    }
    for (auto& t : ts) t.join();
    const bool up = health();
    std::printf("http_storm: %ld connections, %ld answered, %ld failures, %ld health failures, server %s\n",
                g_conns.load(), g_answers.load(), g_failures.load(), health_failures, up ? "up" : "DOWN");
    return g_failures == 0 && health_failures == 0 && up ? 0 : 1;
}
