// CPU device: a queue thread that runs submitted ops in order, with a thread pool of
// its own for the ops' parallel work. Two CPU devices are two independent workers,
// which is what a two-stage split on the CPU needs.
#include <pthread.h>
#include <sched.h>

#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/backend/cpu_ops.h"
#include "engine/backend/device.h"
#include "engine/backend/work_queue.h"
#include "engine/core/error.h"

namespace strata {

namespace {

void pin_current_thread(int core) {
    if (core < 0 || core >= static_cast<int>(std::thread::hardware_concurrency())) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}

class CpuDevice final : public Device {
public:
    CpuDevice(std::string name, int threads, int first_core, bool staged_copies, bool profile)
        : name_(std::move(name)),
          pool_(threads,
                [first_core](int i) {
                    if (first_core >= 0) pin_current_thread(first_core + i);
                }),
          ops_(pool_, !staged_copies),
          queue_([first_core] { pin_current_thread(first_core); }, nullptr) {
        ops_.set_profile(profile);
    }

    const std::string& name() const override { return name_; }

    Buffer alloc_host_mapped(size_t bytes) override { return host_buffer(bytes); }  // host memory is the device's

    void submit(std::function<void()> op) override { queue_.submit(std::move(op)); }
    DeviceEvent record() override { return queue_.record(); }
    void wait_event(const DeviceEvent& ev) override { queue_.wait_event(ev); }
    // Inline once the queue is idle: no hop to the queue's thread.
    void run(std::function<void()> op) override { queue_.run(op); }

    Ops& ops() override { return ops_; }

private:
    std::string name_;
    ThreadPool pool_;
    CpuOps ops_;
    WorkQueue queue_;  // last: its thread stops before the ops it runs go
};

}  // namespace

#if defined(STRATA_GPU_BACKEND)
std::unique_ptr<Device> open_gpu_device(const std::string& spec, int index, GpuOptions o);  // gpu_device.cpp; null: none
#endif

std::unique_ptr<Device> open_device(const std::string& spec, int threads, int first_core, bool staged_copies,
                                    GpuOptions gpu, bool cpu_profile) {
    if (spec.rfind("cpu:", 0) == 0) {
        const std::string idx = spec.substr(4);
        if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos || idx.size() > 3)
            fail("unknown device '{}' (expected cpu:N)", spec);
        return std::make_unique<CpuDevice>(spec, std::max(1, threads), first_core, staged_copies, cpu_profile);
    }
    const size_t colon = spec.find(':');
    const std::string kind = spec.substr(0, colon == std::string::npos ? 0 : colon);
    if (kind == "cuda" || kind == "hip") {
        const std::string idx = spec.substr(colon + 1);
        if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos || idx.size() > 3)
            fail("unknown device '{}' (expected {}:N)", spec, kind);
        if (gpu_backend().empty()) fail("device '{}': this build has no GPU backend (available: cpu:N)", spec);
        if (kind != gpu_backend())
            fail("device '{}': this build's GPU backend is {} (use {}:N)", spec, gpu_backend(), gpu_backend());
        // No driver, no such device, or one that fails to start: the stage runs on the CPU,
        // said once in the log.
        std::string why;
#if defined(STRATA_GPU_BACKEND)
        try {
            if (auto d = open_gpu_device(spec, std::stoi(idx), gpu)) return d;
            gpu_device_count(&why);
        } catch (const std::exception& e) {
            why = e.what();
        }
#endif
        spdlog::warn("{}: no usable {} device ({}); this stage runs on the CPU", spec, kind, why);
        return std::make_unique<CpuDevice>(spec, std::max(1, threads), first_core, staged_copies, cpu_profile);
    }
    fail("unknown device '{}' (expected cpu:N, cuda:N or hip:N)", spec);
}

}  // namespace strata
