// The device's memory read bandwidth, measured the way decode reads weights: every block
// streams its share of a buffer far larger than the caches with 16-byte loads and keeps
// a sum (written, so the reads cannot be dropped). For decode's % of bandwidth
// (`strata devices --bandwidth`, tools/gpu-check.sh). Beside it, the rate of copies from
// pinned host memory into the device, which bounds a streamed layer (issue 18's copies).
#include <algorithm>
#include <chrono>

#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

__global__ void read_k(const float4* p, int64_t n, float* out) {
    float s = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.678f) out[blockIdx.x] = s;  // never true for the zeroed buffer; keeps the loads
}

// GB/s of `bytes` moved by run(s) on a stream of its own: the best of reps timed runs
// after one that warms up.
template <typename F>
double best_gbs(size_t bytes, int reps, F&& run) {
    Stream s = stream_create();
    double best = 0.0;
    for (int r = 0; r <= reps; ++r) {
        stream_sync(s);
        const auto t0 = std::chrono::steady_clock::now();
        run(s);
        stream_sync(s);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::max(best, static_cast<double>(bytes) / sec / 1e9);
    }
    stream_destroy(s);
    return best;
}

}  // namespace

double read_bandwidth_gbs(size_t bytes, int reps) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float4));
    void* buf = dev_alloc(static_cast<size_t>(n) * sizeof(float4));
    void* out = dev_alloc(4096 * sizeof(float));
    memset_async(buf, 0, static_cast<size_t>(n) * sizeof(float4), nullptr);
    stream_sync(nullptr);  // zeroed before the timed stream reads it
    const double best = best_gbs(static_cast<size_t>(n) * sizeof(float4), reps, [&](Stream s) {
        launch(read_k, dim3(4096), dim3(256), static_cast<gpuStream_t>(s), static_cast<const float4*>(buf), n,
               static_cast<float*>(out));
        check_launch("read bandwidth");
    });
    dev_free(out);
    dev_free(buf);
    return best;
}

double copy_bandwidth_gbs(size_t bytes, int reps) {
    void* host = host_alloc_mapped(bytes);
    void* buf = dev_alloc(bytes);
    const double best = best_gbs(bytes, reps, [&](Stream s) { copy_async(buf, host, bytes, s); });
    dev_free(buf);
    host_free(host);
    return best;
}

}  // namespace strata::gpu
