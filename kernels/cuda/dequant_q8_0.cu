// Q8_0 dequantization on CUDA: one thread per value. The first kernel of the CUDA
// backend; it keeps the nvcc build path alive until the backend issue lands.
#include <cuda_fp16.h>
#include <cstdint>

#include "kernels/cuda/dequant.h"

namespace strata::cuda {
namespace {

struct BlockQ8_0 {  // 34 bytes: fp16 scale, 32 signed quants (MODEL_SPEC 2.2)
    __half d;
    int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 must be 34 bytes");

__global__ void dequant_q8_0_kernel(const BlockQ8_0* __restrict__ src, float* __restrict__ dst, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const BlockQ8_0& b = src[i / 32];
    dst[i] = __half2float(b.d) * static_cast<float>(b.qs[i % 32]);
}

}  // namespace

int dequantize_q8_0(const void* src, float* dst, int64_t n, cudaStream_t stream) {
    if (n % 32 != 0) return static_cast<int>(cudaErrorInvalidValue);
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    dequant_q8_0_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const BlockQ8_0*>(src), dst, n);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace strata::cuda
