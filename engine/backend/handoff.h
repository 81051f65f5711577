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
#include <condition_variable>
#include <cstdint>
#include <mutex>

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

    // Two stages on one GPU: the reader's spinning wait kernel may hold what the writer's
    // kernels need to run (the runtime promises no concurrency between two streams; a CPU
    // HIP runtime runs one at a time), and then neither moves until the wait times out
    // (found on the first card runs: windows timing out after 60 s). There the writer
    // hands over an event recorded after its publish, and the reader's stream waits for
    // it before its wait kernel: ordered by the runtime, nothing spins. Set by the split
    // runner.
    void set_shared_device(bool on) { shared_device_ = on; }
    bool shared_device() const { return shared_device_; }
    // The writer's publish for `window` is queued, `event` (the writer's runtime event,
    // or null) recorded after it.
    void mark_issued(uint64_t window, void* event = nullptr);
    // Waits until mark_issued(window) or abort, or timeout_ms passes (0 = no limit);
    // returns the event handed over then (null after an abort or the time limit).
    void* await_issued(uint64_t window, int64_t timeout_ms);

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
    bool shared_device_ = false;
    std::mutex issued_mu_;
    std::condition_variable issued_cv_;
    uint64_t issued_ = 0;  // the last window whose publish was issued (kAbort: aborted)
    void* issued_event_ = nullptr;
};

}  // namespace strata
