// Kernel times for STRATA_GPU_PROFILE (profile.cu): while a stream's Profiler is attached
// on a thread, the launch helper (compat.h) brackets each kernel that thread launches on
// the stream with two timing events. After a sync of the stream, collect() reads the
// finished pairs into sums per kernel and grid (a kernel's shapes differ widely: the LM
// head's product is one launch of the dense matmul among dozens of small ones). Kernels are then launched one by one (a profiled
// device has no graphs), so a kernel's time includes the wait for its own launch when
// the host is slower than the device: the host's share shows in GpuOps' item times.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::gpu {

class Profiler;

// The profiler timing this thread's kernels on stream s, or null.
Profiler* profiler_of(gpuStream_t s);

class Profiler {
public:
    explicit Profiler(gpuStream_t s) : stream_(s) {}
    ~Profiler();
    Profiler(const Profiler&) = delete;
    Profiler& operator=(const Profiler&) = delete;

    gpuStream_t stream() const { return stream_; }
    void begin(const void* kernel, dim3 grid);  // before the launch: its start event
    void end();                      // after it: its end event
    void collect();                  // the stream has synced: every pair is done
    std::string report(int top) const;

private:
    gpuEvent_t event();
    struct Key {
        const void* kernel;
        uint32_t x, y, z;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const {
            return std::hash<const void*>()(k.kernel) ^ (static_cast<size_t>(k.x) * 0x9E3779B97F4A7C15ull) ^
                   (static_cast<size_t>(k.y) << 20) ^ (static_cast<size_t>(k.z) << 40);
        }
    };
    struct Mark {
        Key key;
        gpuEvent_t a, b;
    };
    struct Sum {
        int64_t calls = 0;
        double ms = 0.0;
    };
    gpuStream_t stream_;
    std::vector<Mark> marks_;
    std::vector<gpuEvent_t> free_;
    std::unordered_map<Key, Sum, KeyHash> sums_;
};

}  // namespace strata::gpu
