// CPU device: a queue thread that runs submitted ops in order, with a thread pool of
// its own for the ops' parallel work. Two CPU devices are two independent workers,
// which is what a two-stage split on the CPU needs.
#include <pthread.h>
#include <sched.h>

#include <deque>

#include <immintrin.h>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/backend/cpu_ops.h"
#include "engine/backend/device.h"
#include "engine/core/error.h"

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

// The CPU queue's event: set by the queue thread when it reaches the event's place.
struct CpuEvent final : DeviceEvent::Impl {
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

void pin_current_thread(int core) {
    if (core < 0 || core >= static_cast<int>(std::thread::hardware_concurrency())) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

class CpuDevice final : public Device {
public:
    CpuDevice(std::string name, int threads, int first_core, bool staged_copies)
        : name_(std::move(name)),
          pool_(threads,
                [first_core](int i) {
                    if (first_core >= 0) pin_current_thread(first_core + i);
                }),
          ops_(pool_, !staged_copies),
          core_(first_core) {
        worker_ = std::thread([this] { loop(); });
    }
    ~CpuDevice() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
            stop_flag_.store(true);
        }
        cv_.notify_all();
        worker_.join();
    }

    const std::string& name() const override { return name_; }

    Buffer alloc_host_mapped(size_t bytes) override { return host_buffer(bytes); }  // host memory is the device's

    void submit(std::function<void()> op) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            q_.push_back(Item{std::move(op), nullptr});
            pending_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
    }

    DeviceEvent record() override {
        auto st = std::make_shared<CpuEvent>();
        {
            std::lock_guard<std::mutex> lk(mu_);
            q_.push_back(Item{nullptr, st});
            pending_.fetch_add(1, std::memory_order_release);
        }
        cv_.notify_all();
        return DeviceEvent(st);
    }

    void wait_event(const DeviceEvent& ev) override {
        submit([ev] { ev.wait(0); });  // the other queue's error is its waiter's to report
    }

    void run(std::function<void()> op) override {
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return q_.empty() && !busy_; });
            busy_ = true;  // the queue's thread starts nothing until it is released
        }
        struct Release {
            CpuDevice& d;
            ~Release() { d.done_item(); }
        } release{*this};
        op();
    }

    Ops& ops() override { return ops_; }

private:
    void done_item() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            busy_ = false;
        }
        cv_.notify_all();
    }

    struct Item {
        std::function<void()> op;             // work, or
        std::shared_ptr<CpuEvent> event;  // an event to signal
    };

    void loop() {
        pin_current_thread(core_);
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
                it.event->signal(pending);
                pending = nullptr;
            }
            done_item();
        }
    }

    std::string name_;
    ThreadPool pool_;
    CpuOps ops_;
    int core_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Item> q_;
    bool stop_ = false;
    bool busy_ = false;  // an item runs, on the queue's thread or inline (run)
    std::atomic<bool> stop_flag_{false};  // stop_, readable while spinning
    std::atomic<size_t> pending_{0};      // items in q_, readable while spinning
    std::thread worker_;
};

}  // namespace

std::unique_ptr<Device> open_device(const std::string& spec, int threads, int first_core, bool staged_copies) {
    if (spec.rfind("cpu:", 0) == 0) {
        const std::string idx = spec.substr(4);
        if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos || idx.size() > 3)
            fail("unknown device '{}' (expected cpu:N)", spec);
        return std::make_unique<CpuDevice>(spec, std::max(1, threads), first_core, staged_copies);
    }
    if (spec.rfind("cuda:", 0) == 0 || spec.rfind("hip:", 0) == 0)
        fail("device '{}': this build has no GPU backend yet (available: cpu:N)", spec);
    fail("unknown device '{}' (expected cpu:N)", spec);
}

}  // namespace strata
