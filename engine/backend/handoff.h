// The hand-off between stage i and stage i+1: a payload (window tokens x n_embd
// activations), a 64-bit ready word and a 32-bit error word, in host memory that both
// devices can see (pinned and mapped on GPUs; ordinary aligned memory on CPU devices,
// with std::atomic release/acquire in place of system-scope fences).
//
// Protocol, per window with sequence number w (w >= 1, increasing):
//   publish(w): the writer's last step. Payload stores, then ready.store(w, release):
//               a reader that sees ready == w also sees the payload.
//   wait(w):    the reader's first step. Spin with back-off until ready == w (acquire),
//               the abort value, or the time limit; on expiry it sets the error word so
//               the host learns which boundary failed.
//   abort():    raises the ready word to kAbort so no reader is left spinning.
#pragma once
#include <atomic>
#include <cstdint>

#include "engine/backend/device.h"

namespace strata {

class Handoff {
public:
    static constexpr uint64_t kAbort = ~uint64_t{0};
    enum class Wait { Ready, TimedOut, Aborted };
    enum Error : uint32_t { kNoError = 0, kTimeout = 1, kAborted = 2 };

    // Payload capacity in floats; memory from the host-mapped allocator of `dev`.
    Handoff(Device& dev, size_t payload_floats);

    float* payload() { return payload_; }
    size_t capacity() const { return capacity_; }

    void publish(uint64_t window);
    // timeout_ms 0 = no limit.
    Wait wait(uint64_t window, int64_t timeout_ms);
    void abort();
    // Back to the initial state (nothing published, no error): after a restart.
    void reset();

    uint32_t error() const { return err_->load(std::memory_order_acquire); }
    // Why the last wait failed, from the error word (kAborted unless it timed out).
    Wait failure() const { return error() == kTimeout ? Wait::TimedOut : Wait::Aborted; }
    uint64_t ready() const { return ready_->load(std::memory_order_acquire); }
    // The ready word's address, for a GPU kernel that raises it with a volatile store after
    // a system-scope fence (a lock-free std::atomic<uint64_t> is the word itself).
    uint64_t* ready_word() { return reinterpret_cast<uint64_t*>(ready_); }
    // The error word's address, for a GPU kernel that waits on the device (kTimeout or
    // kAborted written with a volatile store).
    uint32_t* error_word() { return reinterpret_cast<uint32_t*>(err_); }
    // Microseconds between the last publish and the wait that saw it (for benchmarks).
    int64_t last_wake_latency_ns() const { return last_latency_ns_; }

private:
    Buffer mem_;
    float* payload_ = nullptr;
    size_t capacity_ = 0;
    static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8);
    static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == 4);
    std::atomic<uint64_t>* ready_ = nullptr;  // in mem_, its own cache line
    std::atomic<uint32_t>* err_ = nullptr;    // in mem_, next to the ready word
    std::atomic<int64_t> published_at_ns_{0};
    int64_t last_latency_ns_ = 0;
};

}  // namespace strata
