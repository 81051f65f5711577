// Host entry points of the CUDA dequantization kernels. They return a cudaError_t
// value as int (0 = success) so callers need not include CUDA headers to check it.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace strata::cuda {

// dst[i] = value i of n Q8_0-encoded values at src (device pointers), on `stream`.
int dequantize_q8_0(const void* src, float* dst, int64_t n, cudaStream_t stream);

}  // namespace strata::cuda
