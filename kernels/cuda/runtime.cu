// The runtime calls of gpu.h: device discovery, memory, streams and copies.
#include <cstring>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {
void check(gpuError_t e, const char* what) {
    if (e != gpuSuccess) fail("{} failed: {}", what, gpuGetErrorString(e));
}
}  // namespace

// graph.cu: what a recorder holds for s (or this thread's) is issued first.
void settle(Stream s);
void settle_thread();

const char* backend_name() {
#if defined(STRATA_GPU_HIP)
    return "hip";
#else
    return "cuda";
#endif
}

int device_count(std::string* why) {
    int n = 0;
    const gpuError_t e = gpuGetDeviceCount(&n);
    if (e != gpuSuccess) {
        if (why) *why = gpuGetErrorString(e);
        (void)gpuGetLastError();  // not sticky: clear it for later calls
        return 0;
    }
    if (n == 0 && why) *why = "no device";
    return n;
}

std::string device_name(int dev) {
#if defined(STRATA_GPU_HIP)
    hipDeviceProp_t p{};
    check(hipGetDeviceProperties(&p, dev), "hipGetDeviceProperties");
#else
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
#endif
    return p.name;
}

void device_memory(int dev, int64_t* free_bytes, int64_t* total_bytes) {
    set_device(dev);
    size_t f = 0, t = 0;
    check(gpuMemGetInfo(&f, &t), "memory info");
    *free_bytes = static_cast<int64_t>(f);
    *total_bytes = static_cast<int64_t>(t);
}

#if defined(STRATA_HIP_CPU)
namespace {
__global__ void warp_size_k(int* out) { *out = warpSize; }
}  // namespace
#endif

// A card's from its attributes. A CPU HIP runtime's device properties give its SIMD
// width, not the 64 lanes its kernels see, so there the device itself is asked, by a
// kernel: never on a card, where the probe's cudaFree waits for the whole device (a
// stage's hand-off wait kernel spinning on a card two stages share would hold it).
int warp_size() {
    thread_local int dev = -1, size = 0;
    int cur = 0;
    check(gpuGetDevice(&cur), "get device");
    if (cur != dev) {
#if defined(STRATA_HIP_CPU)
        int* p = static_cast<int*>(dev_alloc(sizeof(int)));
        launch(warp_size_k, dim3(1), dim3(1), nullptr, p);
        check_launch("warp size");
        check(gpuStreamSynchronize(nullptr), "warp size");
        check(gpuMemcpyAsync(&size, p, sizeof(int), gpuMemcpyDefault, nullptr), "warp size");
        check(gpuStreamSynchronize(nullptr), "warp size");
        dev_free(p);
#elif defined(STRATA_GPU_HIP)
        check(hipDeviceGetAttribute(&size, hipDeviceAttributeWarpSize, cur), "warp size");
#else
        check(cudaDeviceGetAttribute(&size, cudaDevAttrWarpSize, cur), "warp size");
#endif
        STRATA_CHECK(size == 32 || size == 64, "device {}: warp size {}", cur, size);
        dev = cur;
    }
    return size;
}

void set_device(int dev) {
    thread_local int current = -1;
    if (current == dev) return;
    check(gpuSetDevice(dev), "set device");
    current = dev;
}

Stream stream_create() {
    gpuStream_t s{};
    check(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), "stream create");
    return static_cast<Stream>(s);
}

void stream_destroy(Stream s) { (void)gpuStreamDestroy(static_cast<gpuStream_t>(s)); }

void stream_sync(Stream s) {
    settle(s);
    check(gpuStreamSynchronize(static_cast<gpuStream_t>(s)), "stream synchronize");
}

Event event_create() {
    gpuEvent_t e{};
    check(gpuEventCreateWithFlags(&e, gpuEventDisableTiming), "event create");
    return static_cast<Event>(e);
}

void event_destroy(Event e) { (void)gpuEventDestroy(static_cast<gpuEvent_t>(e)); }

void event_record(Event e, Stream s) {
    settle(s);
    check(gpuEventRecord(static_cast<gpuEvent_t>(e), static_cast<gpuStream_t>(s)), "event record");
}

void event_sync(Event e) { check(gpuEventSynchronize(static_cast<gpuEvent_t>(e)), "event synchronize"); }

void stream_wait(Stream s, Event e) {
    settle(s);
#if defined(STRATA_HIP_CPU)
    // HIP-CPU's hipStreamWaitEvent across streams hangs; its streams run one after
    // another anyway, so the host waiting here orders the same work.
    (void)s;
    check(gpuEventSynchronize(static_cast<gpuEvent_t>(e)), "event synchronize");
#else
    check(gpuStreamWaitEvent(static_cast<gpuStream_t>(s), static_cast<gpuEvent_t>(e), 0), "stream wait");
#endif
}

#if defined(STRATA_HIP_CPU)
// HIP-CPU's hipMalloc aligns to 16 bytes; the op set promises 64 (a GPU's runtime gives
// 256). Its "device" memory is host memory, so the original pointer can sit just below.
void* dev_alloc(size_t bytes) {
    void* raw = nullptr;
    const gpuError_t e = gpuMalloc(&raw, bytes + 64);
    if (e != gpuSuccess) fail("device memory: {} bytes could not be allocated ({})", bytes, gpuGetErrorString(e));
    auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 64) & ~uintptr_t{63});
    std::memcpy(p - sizeof(void*), &raw, sizeof(void*));
    return p;
}

void dev_free(void* p) {
    if (!p) return;
    settle_thread();  // collected work may still use it
    void* raw;
    std::memcpy(&raw, static_cast<uint8_t*>(p) - sizeof(void*), sizeof(void*));
    (void)gpuFree(raw);
}

// Streams run one after another here: nothing spins while another stream frees.
void* dev_alloc_async(size_t bytes, Stream) { return dev_alloc(bytes); }

void dev_free_async(void* p, Stream) { dev_free(p); }
#else
void* dev_alloc(size_t bytes) {
    void* p = nullptr;
    const gpuError_t e = gpuMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        fail("device memory: {} bytes could not be allocated ({})", bytes, gpuGetErrorString(e));
    }
    return p;
}

void dev_free(void* p) {
    settle_thread();  // collected work may still use it
    (void)gpuFree(p);
}

void* dev_alloc_async(size_t bytes, Stream s) {
    void* p = nullptr;
    const gpuError_t e = gpuMallocAsync(&p, bytes == 0 ? 1 : bytes, static_cast<gpuStream_t>(s));
    if (e != gpuSuccess) {
        (void)gpuGetLastError();
        fail("device memory: {} bytes could not be allocated ({})", bytes, gpuGetErrorString(e));
    }
    return p;
}

void dev_free_async(void* p, Stream s) {
    if (!p) return;
    settle(s);  // collected work on s may still use it
    (void)gpuFreeAsync(p, static_cast<gpuStream_t>(s));
}
#endif

void* host_alloc_mapped(size_t bytes) {
    void* p = nullptr;
#if defined(STRATA_HIP_CPU)
    check(hipHostMalloc(&p, bytes == 0 ? 1 : bytes, hipHostMallocMapped), "pinned host alloc");  // flags are an enum there
#else
    check(gpuHostAlloc(&p, bytes == 0 ? 1 : bytes, gpuHostAllocMapped | gpuHostAllocPortable), "pinned host alloc");
#endif
    std::memset(p, 0, bytes);
    return p;
}

void host_free(void* p) { (void)gpuFreeHost(p); }

void memset_async(void* p, int v, size_t bytes, Stream s) {
    const auto st = static_cast<gpuStream_t>(s);
    if (Recorder* r = recorder_of(st)) {
        const uint64_t k[4] = {1, reinterpret_cast<uintptr_t>(p), static_cast<uint64_t>(v), bytes};
        r->key_of(k);
        r->add([p, v, bytes](gpuStream_t x) { check(gpuMemsetAsync(p, v, bytes, x), "memset"); });
        return;
    }
    check(gpuMemsetAsync(p, v, bytes, st), "memset");
}

void copy_async(void* dst, const void* src, size_t bytes, Stream s) {
    if (bytes == 0) return;
    const auto st = static_cast<gpuStream_t>(s);
    if (Recorder* r = recorder_of(st)) {
        const uint64_t k[4] = {2, reinterpret_cast<uintptr_t>(dst), reinterpret_cast<uintptr_t>(src), bytes};
        r->key_of(k);
        r->add([dst, src, bytes](gpuStream_t x) { check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDefault, x), "copy"); });
        return;
    }
    check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDefault, st), "copy");
}

void check_launch(const char* what) { check(gpuGetLastError(), what); }

}  // namespace strata::gpu
