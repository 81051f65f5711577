// strata-server: the OpenAI-compatible HTTP server. The one boundary where errors
// become a message and an exit code; SIGINT/SIGTERM stop it cleanly: no new
// connections, requests in flight get --grace-ms to finish, then are cancelled.
#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "server/demo.h"
#include "server/http_server.h"
#include "server/options.h"

namespace {

using namespace strata;
using namespace strata::server;

int serve(const ServerOptions& o0) {
    ServerOptions o = o0;
    // Signals go to one thread that waits for them; block them before any thread starts.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);

    HttpServer http(o);
    const int port = http.bind();
    spdlog::info("strata-server listening on http://{}:{} (model '{}', {} slot(s), queue {})", o.host, port, o.alias,
                 o.engine.n_parallel, o.engine.queue_limit);

    std::mutex mu;
    std::condition_variable cv;
    bool listener_done = false;
    std::thread listener([&] {
        http.listen();
        std::lock_guard lk(mu);
        listener_done = true;
        cv.notify_all();
    });
    std::thread signals([&] {
        int sig = 0;
        sigwait(&set, &sig);
        {
            std::lock_guard lk(mu);
            if (listener_done) return;  // woken by main at exit
        }
        spdlog::info("signal {}: no new requests; finishing those in flight (up to {} ms)", sig, o.grace_ms);
        auto engine = http.engine_or_null();
        if (engine) engine->shutdown(false);
        http.stop();
        std::unique_lock lk(mu);
        if (!cv.wait_for(lk, std::chrono::milliseconds(o.grace_ms), [&] { return listener_done; }) && engine) {
            spdlog::info("grace time over: cancelling the requests still running");
            engine->shutdown(true);
        }
    });
    // Joins both threads however serve() ends.
    struct Join {
        std::thread &listener, &signals;
        std::mutex& mu;
        bool& done;
        HttpServer& http;
        ~Join() {
            http.stop();
            if (listener.joinable()) listener.join();
            {
                std::lock_guard lk(mu);
                done = true;
            }
            pthread_kill(signals.native_handle(), SIGTERM);  // wakes sigwait if no signal came
            if (signals.joinable()) signals.join();
        }
    } join{listener, signals, mu, listener_done, http};

    auto progress = [](const std::string& line) { spdlog::info("load: {}", line); };
    if (o.demo) {
        o.runner.model_path = demo_model_path();
        ensure_demo_model(o.runner.model_path, progress);
    }
    std::shared_ptr<Engine> engine = Engine::load(o.runner, o.engine, progress);
    http.set_engine(engine);
    spdlog::info("ready: serving '{}' on http://{}:{}", o.alias, o.host, port);
    engine.reset();  // the server holds it; it goes with the server
    listener.join();
    spdlog::info("stopped");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    strata::init_logging();  // stderr
    strata::Flags f = strata::server::server_flags();
    try {
        f.parse(argc, argv);
        if (f.help()) {
            fmt::print("{}", f.help_text());
            return 0;
        }
        if (!f.positional().empty())
            throw strata::UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
        const strata::server::ServerOptions o = strata::server::server_options(f);
        spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
        return serve(o);
    } catch (const strata::UsageError& e) {
        fmt::print(stderr, "error: {}\n(see 'strata-server --help')\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return 1;
    }
}
