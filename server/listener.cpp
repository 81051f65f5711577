#include "server/listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "engine/core/error.h"

namespace strata::server {

using Clock = std::chrono::steady_clock;

namespace {

thread_local int t_current_fd = -1;

// Bytes a connection may hold beyond its framed limits (chunk-size lines, CRLFs).
constexpr size_t kFramingSlack = 64 << 10;
// How long a refused or finished connection is drained before it is closed: closing
// with unread bytes would send a reset that can destroy the answer in flight.
constexpr auto kDrain = std::chrono::milliseconds(2000);

void endpoint(const sockaddr_storage& ss, std::string& addr, int& port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
        inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        port = ntohs(a->sin6_port);
    }
    addr = buf;
}

const char* reason(int status) {
    switch (status) {
        case 400: return "Bad Request";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 414: return "URI Too Long";
        case 415: return "Unsupported Media Type";
        case 417: return "Expectation Failed";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return "Error";
    }
}

// Sends all of s on a non-blocking socket, waiting up to timeout for room each time.
bool send_all(int fd, const char* p, size_t n, std::chrono::milliseconds timeout) {
    size_t done = 0;
    while (done < n) {
        const ssize_t k = ::send(fd, p + done, n - done, MSG_NOSIGNAL);
        if (k > 0) {
            done += static_cast<size_t>(k);
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            pollfd pf{fd, POLLOUT, 0};
            const int r = ::poll(&pf, 1, static_cast<int>(timeout.count()));
            if (r <= 0 || (pf.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
        } else {
            return false;
        }
    }
    return true;
}

}  // namespace

struct Conn {
    enum class Phase { Idle, Head, Body, Queued, Draining };
    int fd = -1;
    std::string buf;  // from the start of the current request
    RequestFramer framer;
    Phase phase = Phase::Idle;
    Clock::time_point deadline;
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
    size_t served = 0;
    bool continue_sent = false;
    explicit Conn(const FramerLimits& l) : framer(l) {}
};

namespace {

// One framed request as httplib reads it: the request's bytes, then end of stream (so
// httplib can never block on the client, nor read past the request); writes go to the
// socket, bounded by the write timeout.
class ConnStream final : public httplib::Stream {
public:
    ConnStream(const Conn& c, std::chrono::milliseconds write_timeout)
        : c_(c), in_(c.framer.frame().forward), timeout_(write_timeout) {}
    bool is_readable() const override { return pos_ < in_.size(); }
    bool is_writable() const override {
        pollfd pf{c_.fd, POLLOUT, 0};
        const int r = ::poll(&pf, 1, static_cast<int>(timeout_.count()));
        return r > 0 && (pf.revents & POLLOUT) && !(pf.revents & (POLLERR | POLLHUP | POLLNVAL));
    }
    ssize_t read(char* ptr, size_t size) override {
        const size_t n = std::min(size, in_.size() - pos_);
        std::memcpy(ptr, in_.data() + pos_, n);
        pos_ += n;
        return static_cast<ssize_t>(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
        wrote_ = wrote_ || size > 0;
        return send_all(c_.fd, ptr, size, timeout_) ? static_cast<ssize_t>(size) : -1;
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.remote_addr;
        port = c_.remote_port;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.local_addr;
        port = c_.local_port;
    }
    int socket() const override { return c_.fd; }
    bool wrote() const { return wrote_; }

private:
    const Conn& c_;
    const std::string& in_;
    size_t pos_ = 0;
    std::chrono::milliseconds timeout_;
    bool wrote_ = false;
};

std::string raw_response(int status, const std::string& body) {
    std::string r = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                                "Connection: close\r\n",
                                status, reason(status), body.size());
    if (status == 503) r += "Retry-After: 1\r\n";
    return r + "\r\n" + body;
}

bool is_control_route(const Frame& f) {
    if (f.method != "GET") return false;
    const std::string path = f.target.substr(0, f.target.find('?'));
    return path == "/health" || path == "/metrics" || path == "/v1/models";
}

}  // namespace

Listener::Listener(ListenerOptions opt, Serve serve, ErrorBody error_body)
    : opt_(std::move(opt)), serve_(std::move(serve)), error_body_(std::move(error_body)) {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) throw Error(fmt::format("eventfd: {}", std::strerror(errno)));
}

Listener::~Listener() {
    stop();
    {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return !running_; });
    }
    for (auto& c : conns_)
        if (c->fd >= 0) ::close(c->fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    ::close(wake_fd_);
}

int Listener::current_fd() { return t_current_fd; }

int Listener::bind(const std::string& host, int port_wanted) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(port_wanted);
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
        throw Error(fmt::format("cannot resolve '{}': {}", host, gai_strerror(rc)));
    std::string why = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, opt_.backlog) == 0) {
            listen_fd_ = fd;
            break;
        }
        why = std::strerror(errno);
        ::close(fd);
    }
    ::freeaddrinfo(res);
    if (listen_fd_ < 0) throw Error(fmt::format("cannot listen on {}:{}: {} (in use?)", host, port_wanted, why));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    std::string addr;
    int bound = 0;
    endpoint(ss, addr, bound);
    return bound;
}

void Listener::wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void Listener::stop() {
    stopping_ = true;
    wake();
    cv_.notify_all();
}

void Listener::run() {
    if (listen_fd_ < 0) throw Error("Listener::run before bind");
    {
        std::lock_guard lk(mu_);
        running_ = true;
    }
    std::vector<std::thread> workers;
    for (size_t i = 0; i < opt_.workers; ++i) workers.emplace_back([this] { worker(false); });
    for (size_t i = 0; i < opt_.control_workers; ++i) workers.emplace_back([this] { worker(true); });
    io_loop();
    {
        std::lock_guard lk(mu_);
        workers_exit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers) t.join();
    std::lock_guard lk(mu_);
    for (auto& c : returned_) ::close(c->fd);
    returned_.clear();
    running_ = false;
    cv_.notify_all();
}

void Listener::io_loop() {
    std::vector<pollfd> pfds;
    std::vector<Conn*> polled;
    while (!stopping_) {
        {
            std::vector<std::unique_ptr<Conn>> back;
            {
                std::lock_guard lk(mu_);
                back.swap(returned_);
            }
            for (auto& c : back) {
                conns_.push_back(std::move(c));
                if (conns_.back()->phase == Conn::Phase::Idle && !conns_.back()->buf.empty()) advance(*conns_.back());
            }
        }
        // Closed connections (fd < 0) and those a worker took leave the list here.
        std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return !c || c->fd < 0; });

        pfds.clear();
        polled.clear();
        pfds.push_back({wake_fd_, POLLIN, 0});
        if (conns_.size() < opt_.max_connections) pfds.push_back({listen_fd_, POLLIN, 0});
        const size_t first_conn = pfds.size();
        auto next = Clock::now() + std::chrono::seconds(1);
        // Bodies stop being read while the bytes held for all connections are over the
        // budget (their deadlines still run); heads and drains always are.
        size_t held = 0;
        for (auto& c : conns_) held += c->buf.size();
        const bool over = held > opt_.buffer_budget;
        for (auto& c : conns_) {
            pfds.push_back({c->fd, static_cast<short>(over && c->phase == Conn::Phase::Body ? 0 : POLLIN), 0});
            polled.push_back(c.get());
            next = std::min(next, c->deadline);
        }
        const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
        const int r = ::poll(pfds.data(), pfds.size(), static_cast<int>(std::clamp<int64_t>(wait + 1, 0, 1000)));
        if (r < 0 && errno != EINTR) {
            spdlog::error("poll: {}", std::strerror(errno));
            break;
        }
        if (pfds[0].revents) {
            uint64_t v;
            [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &v, sizeof v);
        }
        if (first_conn == 2 && (pfds[1].revents & POLLIN)) accept_all();
        for (size_t i = 0; i < polled.size(); ++i)
            if (pfds[first_conn + i].revents && polled[i]->fd >= 0) on_readable(*polled[i]);
        const auto now = Clock::now();
        for (auto& c : conns_) {
            if (!c || c->fd < 0 || now < c->deadline) continue;
            switch (c->phase) {
                case Conn::Phase::Head:
                    refuse(*c, 408, fmt::format("the request head did not arrive within {} ms", opt_.head_timeout.count()));
                    break;
                case Conn::Phase::Body:
                    refuse(*c, 408, fmt::format("the request body did not arrive within {} ms", opt_.body_timeout.count()));
                    break;
                default: close_conn(*c); break;  // idle, or drained long enough
            }
        }
    }
    for (auto& c : conns_)
        if (c && c->fd >= 0) close_conn(*c);
    conns_.clear();
    ::close(listen_fd_);
    listen_fd_ = -1;
}

void Listener::accept_all() {
    while (conns_.size() < opt_.max_connections) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) spdlog::warn("accept: {}", std::strerror(errno));
            return;
        }
        // SSE writes many small chunks: without TCP_NODELAY, Nagle's algorithm and the
        // client's delayed ACK hold each one back for tens of milliseconds.
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto c = std::make_unique<Conn>(opt_.limits);
        c->fd = fd;
        endpoint(peer, c->remote_addr, c->remote_port);
        sockaddr_storage self{};
        len = sizeof self;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
        endpoint(self, c->local_addr, c->local_port);
        c->deadline = Clock::now() + opt_.head_timeout;  // the first byte comes within the head's time
        conns_.push_back(std::move(c));
    }
}

void Listener::on_readable(Conn& c) {
    char tmp[64 << 10];
    const size_t cap = opt_.limits.max_head + 2 * opt_.limits.max_body + kFramingSlack;
    for (;;) {
        const ssize_t n = ::recv(c.fd, tmp, sizeof tmp, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) return close_conn(c);  // the client closed (or reset) before a whole request
        if (c.phase == Conn::Phase::Draining) continue;  // discarded
        if (c.phase == Conn::Phase::Idle) {
            c.phase = Conn::Phase::Head;
            c.deadline = Clock::now() + opt_.head_timeout;
        }
        c.buf.append(tmp, static_cast<size_t>(n));
        if (c.buf.size() > cap)
            return refuse(c, 413, fmt::format("the request is over the limit of {} bytes (--max-body)", opt_.limits.max_body));
        if (!advance(c)) return;  // a worker has it now: hands off
        if (c.fd < 0 || c.phase == Conn::Phase::Draining) return;
    }
}

bool Listener::advance(Conn& c) {
    if (!c.framer.frame().head_done) {
        // Blank lines before a request line are skipped (RFC 9112 2.2).
        size_t skip = 0;
        while (c.buf.compare(skip, 2, "\r\n") == 0) skip += 2;
        if (skip) {
            c.buf.erase(0, skip);
            c.framer.reset();  // it may have seen a lone CR of them
        }
        if (c.buf.empty()) return true;
        if (c.phase == Conn::Phase::Idle) {
            c.phase = Conn::Phase::Head;
            c.deadline = Clock::now() + opt_.head_timeout;
        }
    }
    const bool had_head = c.framer.frame().head_done;
    const Frame& f = c.framer.feed(c.buf);
    if (f.state == Frame::State::Failed) {
        refuse(c, f.status, f.message);
        return true;
    }
    if (f.head_done && !had_head) {
        c.phase = Conn::Phase::Body;
        c.deadline = Clock::now() + opt_.body_timeout;
        if (f.expect_continue && f.state == Frame::State::NeedMore && !c.continue_sent) {
            static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            c.continue_sent = true;
            if (!send_all(c.fd, kContinue.data(), kContinue.size(), opt_.write_timeout)) {
                close_conn(c);
                return true;
            }
        }
    }
    if (f.state != Frame::State::Complete) return true;
    for (auto& p : conns_) {
        if (p.get() != &c) continue;
        dispatch(std::move(p));  // leaves a null in conns_, erased on the next round
        return false;
    }
    return true;
}

void Listener::dispatch(std::unique_ptr<Conn> c) {
    c->phase = Conn::Phase::Queued;
    const bool control = is_control_route(c->framer.frame());
    {
        std::lock_guard lk(mu_);
        if (!control && dispatched_ >= opt_.max_pending) {
            conns_.push_back(std::move(c));  // back to the poll thread to be refused and drained
            Conn& back = *conns_.back();
            back.phase = Conn::Phase::Head;
            refuse(back, 503, "the server is overloaded: too many requests are waiting; retry shortly");
            return;
        }
        ++dispatched_;
        (control ? control_queue_ : api_queue_).push_back(std::move(c));
    }
    cv_.notify_all();
}

void Listener::worker(bool control) {
    auto& queue = control ? control_queue_ : api_queue_;
    for (;;) {
        std::unique_ptr<Conn> c;
        {
            std::unique_lock lk(mu_);
            cv_.wait(lk, [&] { return !queue.empty() || workers_exit_; });
            if (queue.empty()) return;  // exiting, and nothing left to serve
            c = std::move(queue.front());
            queue.pop_front();
        }
        const bool close = !c->framer.frame().keep_alive || stopping_ || c->served + 1 >= opt_.max_requests_per_connection;
        bool connection_closed = false, ok = false;
        ConnStream strm(*c, opt_.write_timeout);
        t_current_fd = c->fd;
        try {
            ok = serve_(strm, close, connection_closed);
        } catch (...) {
            // The last resort: a fault below httplib's own handlers (the error handler,
            // a content provider). The client gets a 500 if nothing was written yet.
            static std::atomic<bool> logged{false};
            std::string what = "unknown exception";
            try {
                throw;
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            if (!logged.exchange(true)) spdlog::error("a request failed outside its handler: {}", what);
            if (!strm.wrote()) {
                const std::string r = raw_response(500, error_body_(500, "internal error while serving the request"));
                send_all(c->fd, r.data(), r.size(), opt_.write_timeout);
            }
            ok = false;
        }
        t_current_fd = -1;
        ++c->served;
        give_back(std::move(c), ok && !close && !connection_closed);
    }
}

void Listener::give_back(std::unique_ptr<Conn> c, bool keep) {
    if (keep) {
        c->buf.erase(0, c->framer.frame().end);  // what remains is the next request's start
        c->framer.reset();
        c->continue_sent = false;
        c->phase = Conn::Phase::Idle;
        c->deadline = Clock::now() + opt_.idle_timeout;
    } else {
        ::shutdown(c->fd, SHUT_WR);
        c->phase = Conn::Phase::Draining;
        c->deadline = Clock::now() + kDrain;
    }
    {
        std::lock_guard lk(mu_);
        --dispatched_;
        if (workers_exit_ || stopping_) {
            ::close(c->fd);
            return;
        }
        returned_.push_back(std::move(c));
    }
    wake();
}

void Listener::refuse(Conn& c, int status, const std::string& message) {
    if (c.phase != Conn::Phase::Idle || !c.buf.empty()) {
        const std::string r = raw_response(status, error_body_(status, message));
        // A short answer fits the socket's buffer: one non-blocking try, no waiting.
        [[maybe_unused]] const ssize_t n = ::send(c.fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        spdlog::info("{} refused: {} {}", c.remote_addr, status, message);
    }
    ::shutdown(c.fd, SHUT_WR);
    c.buf.clear();
    c.buf.shrink_to_fit();
    c.phase = Conn::Phase::Draining;
    c.deadline = Clock::now() + kDrain;
}

void Listener::close_conn(Conn& c) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
}

}  // namespace strata::server
