// A device: memory, an ordered work queue, and events. CPU devices (`cpu:0`, `cpu:1`)
// are worker pools of their own; CUDA and HIP devices implement the same interface
// (device buffers, pinned host buffers mapped into the device, a stream as the queue).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/buffer.h"

namespace strata {

class Ops;

// Completion of everything submitted to a queue before the event was recorded. Each
// device kind has its own (a CPU queue's is a flag and a condition variable; a GPU's
// wraps its runtime's event); callers see only this handle.
class DeviceEvent {
public:
    class Impl {
    public:
        virtual ~Impl() = default;
        virtual bool done() const = 0;
        virtual bool wait(int64_t timeout_ms) const = 0;
        virtual void rethrow() const = 0;
    };
    DeviceEvent() = default;
    explicit DeviceEvent(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    bool valid() const { return impl_ != nullptr; }
    bool done() const { return !impl_ || impl_->done(); }
    // True when done; false when timeout_ms passed first (0 = wait forever).
    bool wait(int64_t timeout_ms) const { return !impl_ || impl_->wait(timeout_ms); }
    // Rethrows the error of a failed op, if any (call after wait returned true).
    void rethrow() const {
        if (impl_) impl_->rethrow();
    }

private:
    std::shared_ptr<const Impl> impl_;
};

class Device {
public:
    virtual ~Device() = default;
    virtual const std::string& name() const = 0;
    virtual int64_t memory_bytes() const { return -1; }  // -1: unknown
    virtual int64_t free_memory_bytes() const { return -1; }  // what the driver says is free now; -1: unknown

    // Device memory: ops().alloc (what runs on the device allocates through its op set).
    virtual Buffer alloc_host_mapped(size_t bytes) = 0;  // pinned host memory the device can read and write

    // Queue: ops run in submission order, one at a time. An op that throws marks the
    // events recorded after it failed; later ops still run (they check for themselves).
    virtual void submit(std::function<void()> op) = 0;
    virtual DeviceEvent record() = 0;
    // The queue waits here until ev (another queue's) is done, without failing on its
    // error (whoever waits on ev on the host reports that): a cross-queue dependency as a
    // device operation (cudaStreamWaitEvent on a GPU).
    virtual void wait_event(const DeviceEvent& ev) = 0;
    // op as the queue's next item, returning when it is done and rethrowing its error:
    // for a host that would only wait (a serial window's stage, its snapshots). CPU and
    // GPU devices run it on the calling thread once the queue is idle, with no hop to
    // the queue's thread (a GPU's then waits for its stream); this default is submit,
    // record and wait. No time limit: the caller is the one who would enforce it
    // (SplitRunnerImpl::run_on's alarm).
    virtual void run(std::function<void()> op) {
        submit(std::move(op));
        const DeviceEvent ev = record();
        ev.wait(0);
        ev.rethrow();
    }
    // The op set this device executes (engine/backend/ops.h); called from inside its
    // queue's ops.
    virtual Ops& ops() = 0;
};

// The GPU backend this build has ("cuda" or "hip"; empty: none) and how many devices it
// sees now (0 without a driver or a device; `why` then says which, when given).
std::string_view gpu_backend();
int gpu_device_count(std::string* why = nullptr);
struct GpuInfo {
    std::string spec;  // "cuda:0"
    std::string name;  // the driver's name of the card
    int64_t free_bytes = 0, total_bytes = 0;
};
std::vector<GpuInfo> gpu_devices();
// GPU `index`'s memory read bandwidth in GB/s (a streaming read of a buffer of `bytes`,
// the best of a few); 0 without a GPU backend.
double gpu_read_bandwidth(int index, size_t bytes);
// GB/s of copies of `bytes` from pinned host memory into GPU `index` (what bounds a
// streamed layer's copy); 0 without a GPU backend.
double gpu_copy_bandwidth(int index, size_t bytes);

// "cpu:N" with `threads` threads, pinned to cores first_core .. first_core + threads - 1
// where the machine has them (first_core < 0: not pinned). Throws for an unknown device name. staged_copies: a CPU
// device whose ops treat host memory as not theirs (CpuOps, host_memory = false). gpu: how a GPU
// device runs its windows. cpu_profile: a CPU device times each op (engine/backend/op_profile.h).
struct GpuOptions {
    bool graphs = true;    // replay a window's kernels as a graph where it can (kernels/cuda/graph.cu)
    bool profile = false;  // time the host's items and waits, and each kernel without graphs (kernels/cuda/profiler.h)
};
std::unique_ptr<Device> open_device(const std::string& spec, int threads, int first_core,
                                    bool staged_copies = false, GpuOptions gpu = {}, bool cpu_profile = false);

}  // namespace strata
