// The API the server uses: an Engine owns the Runner (model on its device(s)), the
// tokenizer, a bounded request queue and ONE scheduler thread that runs windows over
// every active request (continuous batching). Callers submit token ids and get a
// RequestStream of events back; no HTTP here.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/options.h"
#include "engine/run/runner.h"
#include "engine/serve/request.h"
#include "engine/sample/sampler.h"
#include "engine/text/tokenizer.h"

namespace strata {

class Scheduler;

class Engine {
public:
    Engine(std::shared_ptr<const Model> model, Tokenizer tok, std::unique_ptr<Runner> runner, EngineOptions opt);
    ~Engine();  // cancels everything and joins the scheduler
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Loads the model and builds the runner; progress receives one line per step.
    static std::unique_ptr<Engine> load(const RunnerOptions& ro, const EngineOptions& eo,
                                        const std::function<void(const std::string&)>& progress);

    // Queues a request. Throws EngineError: Invalid (empty prompt, prompt past the
    // context, bad sampling), Busy (queue full), Unavailable (shutting down).
    std::shared_ptr<RequestStream> submit(Request r);
    void cancel(RequestStream& s) { s.cancel(); }

    // Stops taking requests and cancels the queued ones; active ones finish, unless
    // cancel_active. Returns at once; the destructor joins.
    void shutdown(bool cancel_active);

    const Tokenizer& tokenizer() const { return tok_; }
    const Model& model() const { return *model_; }
    int64_t n_ctx() const;
    const EngineOptions& options() const { return opt_; }
    EngineStats stats() const;

private:
    std::shared_ptr<const Model> model_;
    Tokenizer tok_;
    EngineOptions opt_;
    std::unique_ptr<Runner> runner_;
    std::unique_ptr<Scheduler> sched_;  // uses runner_ and tok_: declared after them
};

}  // namespace strata
