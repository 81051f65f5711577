// The hand-off publish as a kernel (shared/seeds/002): each block writes its share of the
// payload into host-mapped memory with plain stores, fences at system scope, and the last
// block to finish raises the ready word, so a reader that sees the word sees the rows.
#include <algorithm>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;

__global__ void publish_k(Rows x, float* payload, uint64_t* ready, uint64_t window, bool drop, unsigned* counter) {
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
            if (!drop) *static_cast<volatile uint64_t*>(ready) = window;
        }
    }
}

}  // namespace

void handoff_publish(Rows x, float* payload, uint64_t* ready, uint64_t window, bool drop, unsigned* counter,
                     Stream s) {
    const int64_t n = x.cols * x.rows;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(64, std::max<int64_t>(1, (n + kThreads - 1) / kThreads)));
    launch(publish_k, dim3(blocks), dim3(kThreads), static_cast<gpuStream_t>(s), x, payload, ready, window, drop,
           counter);
    check_launch("handoff_publish");
}

}  // namespace strata::gpu
