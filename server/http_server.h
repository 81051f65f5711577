// The HTTP layer: routes, authentication, access log and metrics on cpp-httplib.
// It starts serving before the model is loaded (GET /health says 503 until
// set_engine), and talks to the engine only through engine/engine.h.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "engine/text/chat_template.h"
#include "server/listener.h"
#include "server/metrics.h"
#include "server/options.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace strata::server {

class Router;  // httplib's routing and request parsing, run by the Listener's workers

class HttpServer {
public:
    explicit HttpServer(ServerOptions opt);
    ~HttpServer();  // stops the listener and waits for it
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds opt.host:opt.port (port 0: any free port); returns the port. Throws on failure.
    int bind();
    // Serves until stop(); returns once every connection's handler has returned.
    void listen();
    // Stops accepting connections; requests in flight continue until they end.
    void stop();

    // The engine is ready: requests are served from now on. The chat template is the
    // --chat-template one, else the model's; without one, chat requests get 400.
    void set_engine(std::shared_ptr<Engine> engine);
    std::shared_ptr<Engine> engine_or_null() const;
    Metrics& metrics() { return metrics_; }

private:
    void routes();
    std::shared_ptr<Engine> engine() const;  // throws ApiError 503 while loading
    void generate(const httplib::Request& req, httplib::Response& res, bool chat);
    void tokenize(const httplib::Request& req, httplib::Response& res);
    void detokenize(const httplib::Request& req, httplib::Response& res);
    bool authorized(const httplib::Request& req) const;

    ServerOptions opt_;
    std::unique_ptr<Router> svr_;
    std::unique_ptr<Listener> listener_;
    Metrics metrics_;
    mutable std::mutex mu_;
    std::shared_ptr<Engine> engine_;
    std::optional<ChatTemplate> template_;
    std::string template_error_;
    std::atomic<uint64_t> next_id_{0};
    uint64_t id_salt_ = 0;
};

}  // namespace strata::server
