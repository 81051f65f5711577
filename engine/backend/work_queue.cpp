#include "engine/backend/work_queue.h"

#include <immintrin.h>

namespace strata {

namespace {

// Spin briefly before sleeping: on a virtual machine, waking a thread whose core went
// idle costs far more (often a millisecond) than the few microseconds a window's
// hand-off should take. kSpin bounds the burn when the wait is long.
constexpr auto kSpin = std::chrono::microseconds(300);

template <typename P>
bool spin_until(P&& pred) {
    const auto limit = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
        if (pred()) return true;
        _mm_pause();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > limit) return pred();
    }
}

}  // namespace

// The queue's event: set by the queue thread when it reaches the event's place.
struct WorkQueue::Event final : DeviceEvent::Impl {
    mutable std::mutex mu;
    mutable std::condition_variable cv;
    bool done_ = false;
    std::atomic<bool> done_flag{false};  // same as done_, for a lock-free spin before sleeping
    std::exception_ptr error;             // the first op that failed before this event

    bool done() const override {
        std::lock_guard<std::mutex> lk(mu);
        return done_;
    }
    bool wait(int64_t timeout_ms) const override {
        if (spin_until([&] { return done_flag.load(std::memory_order_acquire); })) {
            std::lock_guard<std::mutex> lk(mu);  // pairs with the signaller: error is visible
            return true;
        }
        std::unique_lock<std::mutex> lk(mu);
        if (timeout_ms <= 0) {
            cv.wait(lk, [&] { return done_; });
            return true;
        }
        return cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return done_; });
    }
    void rethrow() const override {
        std::exception_ptr e;
        {
            std::lock_guard<std::mutex> lk(mu);
            e = error;
        }
        if (e) std::rethrow_exception(e);
    }
    void signal(std::exception_ptr err) {
        {
            std::lock_guard<std::mutex> lk(mu);
            done_ = true;
            error = std::move(err);
            done_flag.store(true, std::memory_order_release);
        }
        cv.notify_all();
    }
};

WorkQueue::WorkQueue(std::function<void()> on_start, std::function<void()> before_event)
    : on_start_(std::move(on_start)), before_event_(std::move(before_event)) {
    worker_ = std::thread([this] { loop(); });
}

WorkQueue::~WorkQueue() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
        stop_flag_.store(true);
    }
    cv_.notify_all();
    worker_.join();
}

void WorkQueue::submit(std::function<void()> op) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        q_.push_back(Item{std::move(op), nullptr});
        pending_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
}

DeviceEvent WorkQueue::record() {
    auto st = std::make_shared<Event>();
    {
        std::lock_guard<std::mutex> lk(mu_);
        q_.push_back(Item{nullptr, st});
        pending_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    return DeviceEvent(st);
}

void WorkQueue::wait_event(const DeviceEvent& ev) {
    submit([ev] { ev.wait(0); });  // the other queue's error is its waiter's to report
}

void WorkQueue::run(const std::function<void()>& op) {
    {
        std::unique_lock<std::mutex> lk(mu_);
        if (!q_.empty() || busy_) {
            ++idle_waiters_;
            cv_.wait(lk, [&] { return q_.empty() && !busy_; });
            --idle_waiters_;
        }
        busy_ = true;  // the queue's thread starts nothing until it is released
    }
    struct Release {
        WorkQueue& q;
        ~Release() { q.done_item(); }
    } release{*this};
    op();
    if (before_event_) before_event_();  // done means done on the device too
}

void WorkQueue::done_item() {
    bool wake;
    {
        std::lock_guard<std::mutex> lk(mu_);
        busy_ = false;
        // Only a queued item (for the queue's thread) or a caller of run waits for this.
        // An idle queue's thread sleeps on cv_ too, and waking it for nothing after every
        // inline run costs a futex call and a wake-up that takes a core (~2% of a window's
        // time on a 2-core machine).
        wake = !q_.empty() || idle_waiters_ > 0;
    }
    if (wake) cv_.notify_all();
}

void WorkQueue::loop() {
    if (on_start_) on_start_();
    std::exception_ptr pending;  // first failure since the last event
    for (;;) {
        Item it;
        spin_until([&] { return pending_.load(std::memory_order_acquire) > 0 || stop_flag_.load(); });
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return (stop_ && q_.empty()) || (!q_.empty() && !busy_); });
            if (q_.empty()) return;  // stop requested and drained
            it = std::move(q_.front());
            q_.pop_front();
            pending_.fetch_sub(1, std::memory_order_relaxed);
            busy_ = true;
        }
        if (it.op) {
            try {
                it.op();
            } catch (...) {
                if (!pending) pending = std::current_exception();
            }
        } else {
            try {
                if (before_event_) before_event_();
            } catch (...) {
                if (!pending) pending = std::current_exception();
            }
            it.event->signal(pending);
            pending = nullptr;
        }
        done_item();
    }
}

}  // namespace strata
