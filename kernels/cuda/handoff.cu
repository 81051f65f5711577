// The hand-off as kernels (shared/seeds/002). Publish: each block writes its share of the
// payload into host-mapped memory with plain stores, fences at system scope, and the last
// block to finish raises the ready word, so a reader that sees the word sees the rows.
// Wait: the reading stage's first kernel spins on the ready word, bounded by the device's
// own clock, and on expiry or abort sets the error word and a device flag; the copy of
// the payload then does nothing, and the stage's own publish raises the abort value, so
// the stage after it stops waiting at once. The host learns of it from the error word
// once the stage's work is done and discards the window.
#include <algorithm>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;

__global__ void publish_k(Rows x, float* payload, uint64_t* ready, const uint64_t* window, bool drop, unsigned* counter,
                          const unsigned* failed) {
    const int64_t n = x.cols * x.rows;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float* src = x.p + (i / x.cols) * x.ld + i % x.cols;
        if (src != payload + i) static_cast<volatile float*>(payload)[i] = *src;
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned ticket = atomicAdd(counter, 1u);
        if (ticket == gridDim.x - 1) {  // the last block: every block's stores are fenced
            *counter = 0;
            __threadfence_system();
            const bool hand_in_failed = failed != nullptr && *static_cast<const volatile unsigned*>(failed) != 0;
            if (hand_in_failed) *static_cast<volatile uint64_t*>(ready) = kHandoffAbort;
            else if (!drop) *static_cast<volatile uint64_t*>(ready) = *window;
        }
    }
}

// One block: thread 0 spins. The error word and the flag say why it stopped (0: ready).
__global__ void wait_k(const uint64_t* ready, uint32_t* err, const uint64_t* window_at, uint64_t timeout_ns,
                       unsigned* failed) {
    if (threadIdx.x != 0) return;
    const uint64_t t0 = device_ns(), window = *window_at;
    unsigned why = 0;
    for (;;) {
        const uint64_t r = *static_cast<const volatile uint64_t*>(ready);
        if (r == window) break;
        if (r == kHandoffAbort) {
            why = 2;  // Handoff::kAborted
            break;
        }
        if (timeout_ns > 0 && device_ns() - t0 > timeout_ns) {
            why = 1;  // Handoff::kTimeout
            break;
        }
        spin_pause();
    }
    __threadfence_system();  // the payload is read after the word was seen
    if (why != 0) *static_cast<volatile uint32_t*>(err) = why;
    *failed = why;
}

// x = payload unless the wait failed.
__global__ void take_k(Rows payload, Rows x, const unsigned* failed) {
    if (*failed != 0) return;
    const int64_t n = x.cols * x.rows;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x.p[(i / x.cols) * x.ld + i % x.cols] = static_cast<const volatile float*>(payload.p)[i];
}

}  // namespace

void handoff_wait(const uint64_t* ready, uint32_t* err, const uint64_t* window, int64_t timeout_ms, const float* payload,
                  Rows x, unsigned* failed, Stream s) {
    const auto st = static_cast<gpuStream_t>(s);
    launch(wait_k, dim3(1), dim3(32), st, ready, err, window,
           static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 0) * 1'000'000ull, failed);
    const int64_t n = x.cols * x.rows;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, (n + kThreads - 1) / kThreads)));
    launch(take_k, dim3(blocks), dim3(kThreads), st, Rows{const_cast<float*>(payload), x.cols, x.rows, x.cols}, x,
           failed);
    check_launch("handoff_wait");
}

void handoff_publish(Rows x, float* payload, uint64_t* ready, const uint64_t* window, bool drop, unsigned* counter,
                     const unsigned* failed, Stream s) {
    const int64_t n = x.cols * x.rows;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, (n + kThreads - 1) / kThreads)));
    launch(publish_k, dim3(blocks), dim3(kThreads), static_cast<gpuStream_t>(s), x, payload, ready, window, drop,
           counter, failed);
    check_launch("handoff_publish");
}

}  // namespace strata::gpu
