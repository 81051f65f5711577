// A device's ordered work queue: a thread that runs submitted ops one at a time, events
// that complete when the queue reaches them, and `run` for an op on the caller's thread
// once the queue is idle. CPU devices run their ops' work here; a GPU device's ops queue
// kernels on its stream from here, and its events also wait for the stream
// (before_event).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/backend/device.h"

namespace strata {

class WorkQueue {
public:
    // on_start: run first on the queue's thread (pinning, the GPU's current device).
    // before_event: run on the queue's thread when it reaches an event, before the event
    // completes; what it throws fails the event (a GPU: the stream's sync).
    WorkQueue(std::function<void()> on_start, std::function<void()> before_event);
    ~WorkQueue();
    WorkQueue(const WorkQueue&) = delete;
    WorkQueue& operator=(const WorkQueue&) = delete;

    void submit(std::function<void()> op);
    DeviceEvent record();
    void wait_event(const DeviceEvent& ev);
    // Device::run: op on the calling thread once the queue is idle; rethrows its error.
    void run(const std::function<void()>& op);

    struct Event;

private:
    struct Item {
        std::function<void()> op;      // work, or
        std::shared_ptr<Event> event;  // an event to signal
    };
    void loop();
    void done_item();

    std::function<void()> on_start_, before_event_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Item> q_;
    bool stop_ = false;
    bool busy_ = false;                   // an item runs, on the queue's thread or inline (run)
    int idle_waiters_ = 0;                // callers of run waiting for the queue to be idle
    std::atomic<bool> stop_flag_{false};  // stop_, readable while spinning
    std::atomic<size_t> pending_{0};      // items in q_, readable while spinning
    std::thread worker_;
};

}  // namespace strata
