#include "engine/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <thread>


// Protocol. run() (and run_each) publishes fn_ (each_), ranges_ and active_, then
// bumps generation_ (release); a worker that sees the new generation (acquire) sees them
// too. A worker first spins on generation_; only then does it take mu_, count itself in
// sleepers_ and wait on cv_start_, re-checking generation_ under the lock. run() bumps
// generation_ before it reads sleepers_, and a worker counts itself before it re-reads
// generation_ (all sequentially consistent), so either run() sees the sleeper and
// notifies (under mu_, so the notify cannot fall between the worker's check and its
// wait) or the worker sees the new generation and does not sleep. Completion is the same
// handshake mirrored: the last worker to decrement active_ wakes the caller only if
// caller_asleep_ is set.

namespace strata {
namespace {

constexpr int64_t kSpinMicros = 200;  // ~a few hundred small ops' gap; then sleep
constexpr int64_t kPauseMicros = 20;  // of which pure pause-spinning; then yield-spinning

// Spins until pred() or the spin budget runs out; returns pred(). After kPauseMicros the
// loop yields the core on each turn: on a machine with more runnable threads than cores
// the thread we wait for may be the one that needs it.
template <typename P>
bool spin_until(P&& pred) {
    using clk = std::chrono::steady_clock;
    const auto start = clk::now();
    const auto yield_from = start + std::chrono::microseconds(kPauseMicros);
    const auto limit = start + std::chrono::microseconds(kSpinMicros);
    bool yielding = false;
    for (int i = 0;; ++i) {
        if (pred()) return true;
        if (yielding) {
            std::this_thread::yield();
        } else {
            cpu_relax();
        }
        if ((i & 31) == 31) {
            const auto now = clk::now();
            if (now > limit) return pred();
            yielding = now > yield_from;
        }
    }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, std::function<void(int)> on_start)
    : n_threads_(std::max(1, n_threads)), ranges_(static_cast<size_t>(n_threads_)) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i)
        workers_.emplace_back([this, i, on_start] {
            if (on_start) on_start(i);
            worker_loop(i);
        });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
    }
    cv_start_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::work(int index) {
    if (each_) {
        try {
            (*each_)(index);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu_);
            if (!error_) error_ = std::current_exception();
        }
        return;
    }
    // Its own range, then the others' in turn (a range's counter may pass its end by one
    // claim per thread; such a claim is simply dropped).
    for (int k = 0; k < n_threads_; ++k) {
        Range& r = ranges_[static_cast<size_t>((index + k) % n_threads_)];
        while (r.next.load(std::memory_order_relaxed) < r.end) {
            const int64_t t = r.next.fetch_add(1, std::memory_order_relaxed);
            if (t >= r.end) break;
            try {
                (*fn_)(t);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu_);
                if (!error_) error_ = std::current_exception();
            }
        }
    }
}

void ThreadPool::finish_one() {
    if (active_.fetch_sub(1) == 1 && caller_asleep_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_done_.notify_one();
    }
}

void ThreadPool::worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
        auto ready = [&] { return stop_.load(std::memory_order_relaxed) || generation_.load() != seen; };
        if (!spin_until(ready)) {
            std::unique_lock<std::mutex> lk(mu_);
            sleepers_.fetch_add(1);
            cv_start_.wait(lk, ready);
            sleepers_.fetch_sub(1);
        }
        if (stop_.load()) return;
        seen = generation_.load();
        work(index);
        finish_one();
    }
}

void ThreadPool::run(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t);
        return;
    }
    fn_ = &fn;
    each_ = nullptr;
    start(n_tasks);
    work(0);
    finish();
}

void ThreadPool::run_each(const std::function<void(int)>& fn) {
    if (n_threads_ == 1) {
        fn(0);
        return;
    }
    fn_ = nullptr;
    each_ = &fn;
    start(n_threads_);
    work(0);
    finish();
}

void ThreadPool::start(int64_t n_tasks) {
    error_ = nullptr;  // no worker is inside a run here, so no lock is needed
    for (int i = 0; i < n_threads_; ++i) {
        Range& r = ranges_[static_cast<size_t>(i)];
        r.next.store(n_tasks * i / n_threads_, std::memory_order_relaxed);
        r.end = n_tasks * (i + 1) / n_threads_;
    }
    active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1);  // seq_cst: publishes the fields above
    if (sleepers_.load() > 0) {
        std::lock_guard<std::mutex> lk(mu_);
        cv_start_.notify_all();
    }
}

void ThreadPool::finish() {
    if (!spin_until([&] { return active_.load() == 0; })) {
        std::unique_lock<std::mutex> lk(mu_);
        caller_asleep_.store(true);
        cv_done_.wait(lk, [&] { return active_.load() == 0; });
        caller_asleep_.store(false);
    }
    fn_ = nullptr;
    each_ = nullptr;
    std::exception_ptr err;
    {
        std::lock_guard<std::mutex> lk(mu_);
        err = error_;
    }
    if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    // A few chunks per thread balance uneven work without making chunks tiny.
    const int64_t target = static_cast<int64_t>(n_threads_) * 4;
    const int64_t chunk = std::max(grain, (n + target - 1) / target);
    const int64_t n_chunks = (n + chunk - 1) / chunk;
    run(n_chunks, [&](int64_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); });
}

}  // namespace strata
