// strata devices: what this machine has and what this build can run on it.
#include <thread>

#include <fmt/format.h>

#include "engine/backend/device.h"
#include "tools/commands.h"

namespace strata {

int cmd_devices(int argc, char** argv) {
    (void)argv;
    if (argc > 1) throw UsageError("devices: takes no arguments");
    fmt::print("cpu:N     {} hardware threads (cpu:0, cpu:1... split them; --threads-per-device)\n",
               std::thread::hardware_concurrency());
    if (gpu_backend().empty()) {
        fmt::print("GPU       this build has no GPU backend (build with nvcc present for CUDA)\n");
        return 0;
    }
    std::string why;
    const int n = gpu_device_count(&why);
    if (n == 0) {
        fmt::print("{}:N    this build runs {} devices; none present ({}): a {}:N stage runs on the CPU\n",
                   gpu_backend(), gpu_backend(), why, gpu_backend());
        return 0;
    }
    for (const GpuInfo& g : gpu_devices())
        fmt::print("{:<9} {}, {:.1f} GiB ({:.1f} GiB free)\n", g.spec, g.name, g.total_bytes / 1073741824.0,
                   g.free_bytes / 1073741824.0);
    return 0;
}

}  // namespace strata
