#include "engine/backend/handoff.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <thread>

#include <immintrin.h>

namespace strata {
namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

Handoff::Handoff(Device& dev, size_t payload_floats) : capacity_(payload_floats) {
    // Layout: [ready word | error word | pad to 64 bytes][payload]: the flag words sit
    // on their own cache line so payload stores never share a line with the spinner.
    const size_t header = 64;
    mem_ = dev.alloc_host_mapped(header + payload_floats * sizeof(float));
    auto* base = static_cast<uint8_t*>(mem_.data());
    ready_ = new (base) std::atomic<uint64_t>(0);
    err_ = new (base + 8) std::atomic<uint32_t>(kNoError);
    payload_ = reinterpret_cast<float*>(base + header);
}

void Handoff::publish(uint64_t window) {
    published_at_ns_.store(now_ns(), std::memory_order_relaxed);
    ready_->store(window, std::memory_order_release);  // payload stores happen-before this
}

Handoff::Wait Handoff::wait(uint64_t window, int64_t timeout_ms) {
    const int64_t start = now_ns();
    const int64_t limit = timeout_ms > 0 ? start + timeout_ms * 1'000'000 : INT64_MAX;
    // Back-off: spin with pause while a stage's window could plausibly still be running
    // (the waiting device has nothing else to do, and a sleeping core wakes slowly,
    // especially on a virtual machine), then yield, then sleep so that a long stall does
    // not burn the core forever.
    const int64_t spin_until_ns = start + 50'000'000;   // 50 ms of pause-spinning
    const int64_t yield_until_ns = start + 500'000'000; // then yields up to 0.5 s
    for (uint64_t i = 0;; ++i) {
        const uint64_t r = ready_->load(std::memory_order_acquire);
        if (r == window) {
            last_latency_ns_ = now_ns() - published_at_ns_.load(std::memory_order_relaxed);
            return Wait::Ready;
        }
        if (r == kAbort) {
            err_->store(kAborted, std::memory_order_release);
            return Wait::Aborted;
        }
        _mm_pause();
        if ((i & 63) != 63) continue;
        const int64_t t = now_ns();
        if (t > limit) {
            err_->store(kTimeout, std::memory_order_release);
            return Wait::TimedOut;
        }
        if (t < spin_until_ns) continue;
        if (t < yield_until_ns) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

void Handoff::abort() {
    ready_->store(kAbort, std::memory_order_release);
    {
        std::lock_guard<std::mutex> lk(issued_mu_);
        issued_ = kAbort;  // a reader waiting to issue its wait goes on and sees the abort
        issued_event_ = nullptr;
    }
    issued_cv_.notify_all();
}

void Handoff::reset() {
    err_->store(kNoError, std::memory_order_relaxed);
    ready_->store(0, std::memory_order_release);
    std::lock_guard<std::mutex> lk(issued_mu_);
    issued_ = 0;
    issued_event_ = nullptr;
}

void Handoff::mark_issued(uint64_t window, void* event) {
    {
        std::lock_guard<std::mutex> lk(issued_mu_);
        if (issued_ == kAbort) return;
        issued_ = std::max(issued_, window);
        issued_event_ = event;
    }
    issued_cv_.notify_all();
}

void* Handoff::await_issued(uint64_t window, int64_t timeout_ms) {
    std::unique_lock<std::mutex> lk(issued_mu_);
    const auto done = [&] { return issued_ >= window; };
    if (timeout_ms <= 0) issued_cv_.wait(lk, done);
    else if (!issued_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), done)) return nullptr;
    return issued_ == window ? issued_event_ : nullptr;
}

}  // namespace strata
