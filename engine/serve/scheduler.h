// The engine's one scheduler thread: admits queued requests into slots (one Runner
// sequence each) and runs windows over every active slot until each request ends.
// How a window is formed is explained in docs/server.md ("Scheduling").
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/serve/slot.h"

namespace strata {

class Scheduler {
public:
    Scheduler(Runner& runner, const Tokenizer& tok, EngineOptions opt);
    ~Scheduler();  // cancels everything left and joins the thread

    std::shared_ptr<RequestStream> submit(Request r);
    void shutdown(bool cancel_active);
    EngineStats stats() const;

private:
    struct Queued {
        Request req;
        std::shared_ptr<RequestStream> stream;
        std::chrono::steady_clock::time_point submitted;
    };

    void loop();
    void admit(std::vector<Queued>& fresh);  // queue -> free slots (under mu_)
    void run_window();
    void finish(Slot& s, FinishReason why, std::string error = {},
                Event::ErrorKind kind = Event::ErrorKind::Internal);

    Runner& runner_;
    const Tokenizer& tok_;
    EngineOptions opt_;
    std::vector<Slot> slots_;
    std::vector<float> logits_;  // [rows, n_vocab], one row per window item

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Queued> queue_;
    bool accepting_ = true, stop_ = false, cancel_active_ = false;
    int64_t active_ = 0;
    EngineStats stats_;
    std::thread thread_;  // last member: started once everything above exists
};

}  // namespace strata
