// The one place where CUDA and HIP differ for the GPU kernels of kernels/cuda/: the
// runtime header, the names of its calls (gpu* below), warp shuffles, and the launch
// helper. Every kernel source is written once against these names and builds with nvcc
// (STRATA_CUDA), with hipcc, or with the host compiler against a CPU implementation of
// the HIP runtime (STRATA_HIP_CPU: ROCm's HIP-CPU, a 64-lane "warp", streams run one
// after another). Kernels are warp-size generic: they read warpSize, never assume 32.
#pragma once
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#if defined(STRATA_HIP) || defined(STRATA_HIP_CPU)
#include <hip/hip_runtime.h>
#define STRATA_GPU_HIP 1
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
#define gpuSuccess hipSuccess
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDevice hipGetDevice
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuHostAlloc hipHostMalloc
#define gpuHostAllocMapped hipHostMallocMapped
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuFreeHost hipHostFree
#define gpuHostGetDevicePointer hipHostGetDevicePointer
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuMemGetInfo hipMemGetInfo
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventDestroy hipEventDestroy
#define gpuEventCreate hipEventCreate
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define STRATA_SHFL_XOR(v, m) __shfl_xor((v), (m))
#if !defined(STRATA_HIP_CPU)  // a CPU HIP runtime has no graphs (graph.cu keeps the launches)
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
#define gpuStreamBeginCapture hipStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(exec, g) hipGraphInstantiate((exec), (g), nullptr, nullptr, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphExecDestroy hipGraphExecDestroy
#define gpuGraphDestroy hipGraphDestroy
#endif
#else
#include <cuda_runtime.h>
#define STRATA_GPU_CUDA 1
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
#define gpuSuccess cudaSuccess
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDevice cudaGetDevice
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocMapped cudaHostAllocMapped
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuFreeHost cudaFreeHost
#define gpuHostGetDevicePointer cudaHostGetDevicePointer
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuMemGetInfo cudaMemGetInfo
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventDestroy cudaEventDestroy
#define gpuEventCreate cudaEventCreate
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define STRATA_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
#define gpuStreamBeginCapture cudaStreamBeginCapture
#define gpuStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(exec, g) cudaGraphInstantiate((exec), (g), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphExecDestroy cudaGraphExecDestroy
#define gpuGraphDestroy cudaGraphDestroy
#endif

#include "kernels/cuda/profiler.h"
#include "kernels/cuda/recorder.h"

// HIP-CPU's __forceinline__ is empty without NDEBUG; device functions defined in headers
// must stay inline there too, or two sources including one header do not link.
#if defined(STRATA_HIP_CPU)
#define STRATA_DEV __device__ inline
#else
#define STRATA_DEV __device__ __forceinline__
#endif
#define STRATA_DEV_HOST __host__ __device__ inline  // also called by the launching host code

// Unrolling for the device compilers: a GPU does not run ahead of a load it waits on, so a
// loop whose iterations each load from memory must be unrolled to keep several loads in
// flight (a 16-round loop of 16-byte loads took 12 us where the bytes take 1). A CPU HIP
// runtime's host compiler has its own pragma (and its loops run on a CPU): nothing there.
#define STRATA_PRAGMA(x) _Pragma(#x)
#if defined(STRATA_HIP_CPU)
#define STRATA_UNROLL(n)
#define STRATA_UNROLL_ALL
#else
#define STRATA_UNROLL(n) STRATA_PRAGMA(unroll n)
#define STRATA_UNROLL_ALL STRATA_PRAGMA(unroll)
#endif

#if defined(STRATA_HIP_CPU)
#include <chrono>
#include <thread>
#endif

namespace strata::gpu {

// Nanoseconds of a device clock at a constant rate (for time limits measured on the GPU).
STRATA_DEV uint64_t device_ns() {
#if defined(STRATA_HIP_CPU)
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
#elif defined(__HIP_DEVICE_COMPILE__)
    return static_cast<uint64_t>(__builtin_amdgcn_s_memrealtime()) * 10u;  // 100 MHz on AMD GPUs since gfx8
#elif defined(__CUDA_ARCH__)
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#else
    return 0;  // the host pass of a device function: never called
#endif
}

// A short pause in a spin loop, so that a spinning thread leaves the memory system alone.
STRATA_DEV void spin_pause() {
#if defined(STRATA_HIP_CPU)
    std::this_thread::yield();
#elif defined(__HIP_DEVICE_COMPILE__)
    __builtin_amdgcn_s_sleep(2);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(200);
#endif
}

}  // namespace strata::gpu

namespace strata::gpu {

// The launch itself: <<<>>> lives here alone.
template <typename... KArgs, typename... Args>
inline void issue_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, gpuStream_t stream, Args&&... args) {
#if defined(STRATA_GPU_HIP)
    hipLaunchKernelGGL(kernel, grid, block, 0, stream, static_cast<KArgs>(std::forward<Args>(args))...);
#else
    kernel<<<grid, block, 0, stream>>>(static_cast<KArgs>(std::forward<Args>(args))...);
#endif
}

// Every launch goes through here (no <<<>>> at call sites), so the same kernel sources
// build for CUDA, for HIP and for a CPU HIP runtime, and a stream's recorder (recorder.h)
// sees every launch: it keeps the arguments by value and issues the launch later.
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, gpuStream_t stream, Args&&... args) {
    Recorder* r = recorder_of(stream);
    if (!r) {
        Profiler* p = profiler_of(stream);
        if (p) p->begin(reinterpret_cast<const void*>(kernel), grid);
        issue_kernel(kernel, grid, block, stream, std::forward<Args>(args)...);
        if (p) p->end();
        return;
    }
    std::tuple<std::remove_cv_t<KArgs>...> a{static_cast<KArgs>(std::forward<Args>(args))...};
    r->key_of(reinterpret_cast<uintptr_t>(kernel));
    const uint32_t shape[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
    r->key_of(shape);
    std::apply([r](const auto&... v) { (r->key_of(v), ...); }, a);
    r->add([kernel, grid, block, a](gpuStream_t s) {
        std::apply([&](const auto&... v) { issue_kernel(kernel, grid, block, s, v...); }, a);
    });
}

// Sum over the lanes of one warp (every lane gets it), warp-size generic.
STRATA_DEV float warp_sum(float v) {
    for (int m = warpSize / 2; m > 0; m /= 2) v += STRATA_SHFL_XOR(v, m);
    return v;
}
STRATA_DEV float warp_max(float v) {
    for (int m = warpSize / 2; m > 0; m /= 2) v = fmaxf(v, STRATA_SHFL_XOR(v, m));
    return v;
}

// Sum over the block (every thread gets it); blockDim.x a multiple of warpSize, at most
// 1024. `scratch`: __shared__ float[32] of the caller (32 warps of 32, 16 of 64).
STRATA_DEV float block_sum(float v, float* scratch) {
    v = warp_sum(v);
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, n_warps = blockDim.x / warpSize;
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < n_warps; ++w) s += scratch[w];  // the same order in every thread
    return s;
}
STRATA_DEV float block_max(float v, float* scratch) {
    v = warp_max(v);
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, n_warps = blockDim.x / warpSize;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float s = scratch[0];
    for (int w = 1; w < n_warps; ++w) s = fmaxf(s, scratch[w]);
    return s;
}

// Whether this block is the last of `blocks` blocks sharing `counter` to get here: each
// block's stores are fenced before it counts itself, so the last sees them all (reading
// them through volatile loads). The last sets the counter back to 0, so that the next
// launch (or graph replay) starts from zeros. Every thread of the block calls it (its
// barriers); `done`: __shared__ unsigned of the caller.
STRATA_DEV bool last_to_finish(unsigned* counter, unsigned blocks, unsigned& done) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) done = atomicAdd(counter, 1u);
    __syncthreads();
    if (done != blocks - 1) return false;  // the whole block
    __threadfence();
    if (threadIdx.x == 0) *counter = 0;  // every block has counted
    return true;
}

}  // namespace strata::gpu
