// The connection layer in front of httplib's request handling. One poll thread owns
// the listening socket and every connection while its request arrives: it reads the
// head and body against deadlines and limits (request_framer.h), answers what breaks
// them itself (400/408/413/414/431/...), and hands only complete requests to worker
// threads, which run httplib's routing on them. A client that drips bytes, or an idle
// keep-alive connection, holds buffered bytes on the poll thread, never a worker; the
// health and metrics routes have workers of their own, so they answer while every
// generation worker is busy.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/request_framer.h"

namespace httplib {
class Stream;
}

namespace strata::server {

struct ListenerOptions {
    FramerLimits limits;
    std::chrono::milliseconds head_timeout{10000};  // the whole request head, from its first byte
    std::chrono::milliseconds body_timeout{60000};  // the whole body, from the end of the head
    std::chrono::milliseconds idle_timeout{5000};   // a keep-alive connection between requests
    std::chrono::milliseconds write_timeout{10000}; // one write to a client that does not read
    size_t workers = 16;                // threads for the API routes
    size_t control_workers = 2;         // threads for /health, /metrics, /v1/models
    size_t max_connections = 1024;      // open connections; beyond, new ones wait in the backlog
    size_t max_pending = 256;           // complete requests waiting for a worker; beyond, 503
    size_t buffer_budget = 256u << 20;  // bytes of unfinished requests held for all connections
    int backlog = 1024;                 // listen(2) backlog (the kernel caps it at somaxconn)
    size_t max_requests_per_connection = 1000;
};

struct Conn;

class Listener {
public:
    // Runs one framed request on httplib (Server::process_request); false: close.
    using Serve = std::function<bool(httplib::Stream& strm, bool close_connection, bool& connection_closed)>;
    // The JSON body of a refusal the listener sends itself (OpenAI's error shape).
    using ErrorBody = std::function<std::string(int status, const std::string& message)>;

    Listener(ListenerOptions opt, Serve serve, ErrorBody error_body);
    ~Listener();  // stops, and waits for run() to return
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;

    int bind(const std::string& host, int port);  // port 0: any free port; returns the port; throws on failure
    void run();   // serves until stop(); returns once every worker has finished its request
    void stop();  // no new connections or requests; requests in flight finish

    // The socket of the request the calling worker thread serves (-1 elsewhere).
    static int current_fd();

private:
    void io_loop();
    void worker(bool control);
    void accept_all();
    void on_readable(Conn& c);
    // Frames what is buffered; dispatches or refuses. false: a worker owns c now.
    bool advance(Conn& c);
    void refuse(Conn& c, int status, const std::string& message);
    void dispatch(std::unique_ptr<Conn> c);
    void give_back(std::unique_ptr<Conn> c, bool keep);  // from a worker
    void close_conn(Conn& c);
    void wake();

    ListenerOptions opt_;
    Serve serve_;
    ErrorBody error_body_;
    int listen_fd_ = -1, wake_fd_ = -1;
    std::atomic<bool> stopping_{false};

    std::vector<std::unique_ptr<Conn>> conns_;  // the poll thread's

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Conn>> api_queue_, control_queue_;
    std::vector<std::unique_ptr<Conn>> returned_;
    size_t dispatched_ = 0;  // requests queued or being served
    bool workers_exit_ = false;
    bool running_ = false;   // run() has not returned
};

}  // namespace strata::server
