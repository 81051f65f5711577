// The floor under a hand-off's wake-up (bench/gpu_handoff.cpp): two sides pass one word
// of host-mapped memory back and forth, raising it as publish_k does (a system-scope
// fence, then a volatile store) and spinning on it as wait_k does (volatile loads with
// spin_pause between them). A round is one raise by each side, so a round's time is two
// wake-ups with no kernel launch in between: what is left of a hand-off once the stages'
// kernels are queued, the publish's payload stores aside.
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

// Side 0 raises the odd values and waits for the even ones, side 1 the reverse.
__global__ void pingpong_k(uint64_t* word, int side, int rounds, uint64_t timeout_ns, uint32_t* err) {
    if (threadIdx.x != 0) return;
    volatile uint64_t* w = word;
    const uint64_t t0 = device_ns();
    for (int i = 0; i < rounds; ++i) {
        const uint64_t odd = 2 * static_cast<uint64_t>(i) + 1;
        if (side == 0) {
            __threadfence_system();
            *w = odd;
        }
        const uint64_t want = side == 0 ? odd + 1 : odd;
        while (*w != want) {
            if (*w == kHandoffAbort || (timeout_ns > 0 && device_ns() - t0 > timeout_ns)) {
                *static_cast<volatile uint32_t*>(err) = 1;
                *w = kHandoffAbort;  // the other side stops too
                return;
            }
            spin_pause();
        }
        if (side == 1) {
            __threadfence_system();
            *w = odd + 1;
        }
    }
}

}  // namespace

void flag_pingpong(uint64_t* word, int side, int rounds, int64_t timeout_ms, uint32_t* err, Stream s) {
    launch(pingpong_k, dim3(1), dim3(32), static_cast<gpuStream_t>(s), word, side, rounds,
           static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 0) * 1'000'000ull, err);
    check_launch("flag_pingpong");
}

}  // namespace strata::gpu
