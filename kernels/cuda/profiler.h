// Kernel times for STRATA_GPU_PROFILE (profile.cu): while a stream's Profiler is attached
// on a thread, the launch helper (compat.h) brackets each kernel that thread launches on
// the stream with two timing events. After a sync of the stream, collect() reads the
// finished pairs into per-kernel sums. Kernels are then launched one by one (a profiled
// device has no graphs), so a kernel's time includes the wait for its own launch when
// the host is slower than the device: the host's share shows in GpuOps' item times.
#pragma once
#include <cstdint>
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
    void begin(const void* kernel);  // before the launch: its start event
    void end();                      // after it: its end event
    void collect();                  // the stream has synced: every pair is done
    std::string report(int top) const;

private:
    gpuEvent_t event();
    struct Mark {
        const void* kernel;
        gpuEvent_t a, b;
    };
    struct Sum {
        int64_t calls = 0;
        double ms = 0.0;
    };
    gpuStream_t stream_;
    std::vector<Mark> marks_;
    std::vector<gpuEvent_t> free_;
    std::unordered_map<const void*, Sum> sums_;
};

}  // namespace strata::gpu
