// GPU devices ("cuda:N", "hip:N"): device memory through GpuOps, pinned host memory
// mapped into every device (the hand-off buffers), and a queue whose ops launch kernels
// on the device's stream; an event completes once the queue reached it and the stream
// has run everything before it.
#include <spdlog/spdlog.h>

#include "engine/backend/device.h"
#include "engine/core/error.h"

#if defined(STRATA_GPU_BACKEND)
#include "engine/backend/gpu_ops.h"
#include "engine/backend/work_queue.h"
#endif

namespace strata {

#if defined(STRATA_GPU_BACKEND)

namespace {

class GpuDevice final : public Device {
public:
    GpuDevice(std::string name, int index, GpuOptions o)
        : name_(std::move(name)),
          index_(index),
          ops_(index, o.graphs, o.profile),
          queue_([index] { gpu::set_device(index); }, [this] { ops_.sync(); }) {}

    const std::string& name() const override { return name_; }
    int64_t memory_bytes() const override {
        int64_t free = 0, total = 0;
        gpu::device_memory(index_, &free, &total);
        return total;
    }
    int64_t free_memory_bytes() const override {
        int64_t free = 0, total = 0;
        gpu::device_memory(index_, &free, &total);
        return free;
    }
    Buffer alloc_host_mapped(size_t bytes) override {
        return Buffer(gpu::host_alloc_mapped(bytes), bytes, [](void* p) { gpu::host_free(p); });
    }
    void submit(std::function<void()> op) override { queue_.submit(item(std::move(op))); }
    DeviceEvent record() override { return queue_.record(); }
    void wait_event(const DeviceEvent& ev) override { queue_.wait_event(ev); }
    void run(std::function<void()> op) override { queue_.run(item(std::move(op))); }
    Ops& ops() override { return ops_; }

private:
    // An op of the queue: what it launches is collected and issued as one batch at its
    // end (a graph where one fits), never left behind for a later op.
    std::function<void()> item(std::function<void()> op) {
        return [this, op = std::move(op)] {
            ops_.item_begin();
            try {
                op();
            } catch (...) {
                try {
                    ops_.item_end();  // what was launched still runs: the stream stays in order
                } catch (...) {
                }
                throw;
            }
            ops_.item_end();
        };
    }

    std::string name_;
    int index_;
    GpuOps ops_;
    WorkQueue queue_;  // last: its thread stops before the ops it runs go
};

}  // namespace

std::string_view gpu_backend() { return gpu::backend_name(); }

int gpu_device_count(std::string* why) { return gpu::device_count(why); }

std::vector<GpuInfo> gpu_devices() {
    std::vector<GpuInfo> out;
    const int n = gpu::device_count(nullptr);
    for (int i = 0; i < n; ++i) {
        GpuInfo g{fmt::format("{}:{}", gpu::backend_name(), i), gpu::device_name(i), 0, 0};
        gpu::device_memory(i, &g.free_bytes, &g.total_bytes);
        out.push_back(std::move(g));
    }
    return out;
}

double gpu_read_bandwidth(int index, size_t bytes) {
    gpu::set_device(index);
    return gpu::read_bandwidth_gbs(bytes, 5);
}

double gpu_copy_bandwidth(int index, size_t bytes) {
    gpu::set_device(index);
    return gpu::copy_bandwidth_gbs(bytes, 5);
}

std::unique_ptr<Device> open_gpu_device(const std::string& spec, int index, GpuOptions o) {
    std::string why;
    const int n = gpu::device_count(&why);
    if (index >= n) {
        if (n > 0) why = fmt::format("{} device(s) present", n);
        return nullptr;  // the caller falls back to the CPU, saying why
    }
    return std::make_unique<GpuDevice>(spec, index, o);
}

#else

std::string_view gpu_backend() { return {}; }

int gpu_device_count(std::string* why) {
    if (why) *why = "this build has no GPU backend";
    return 0;
}

std::vector<GpuInfo> gpu_devices() { return {}; }

double gpu_read_bandwidth(int, size_t) { return 0.0; }
double gpu_copy_bandwidth(int, size_t) { return 0.0; }

#endif

}  // namespace strata
