// strata devices: what this machine has and what this build can run on it.
#include <algorithm>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "engine/backend/device.h"
#include "tools/commands.h"

namespace strata {

int cmd_devices(int argc, char** argv) {
    const bool bandwidth = argc == 2 && std::string_view(argv[1]) == "--bandwidth";
    if (argc > 1 && !bandwidth) throw UsageError("devices: takes only --bandwidth (measure each GPU's read and copy bandwidth)");
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
    int index = 0;
    for (const GpuInfo& g : gpu_devices()) {
        fmt::print("{:<9} {}, {:.1f} GiB ({:.1f} GiB free)", g.spec, g.name, g.total_bytes / 1073741824.0,
                   g.free_bytes / 1073741824.0);
        // A quarter of what is free, at most 2 GiB: far past any cache.
        if (bandwidth) {
            fmt::print(", read {:.0f} GB/s",
                       gpu_read_bandwidth(index, static_cast<size_t>(std::min<int64_t>(g.free_bytes / 4, int64_t{2} << 30))));
            fmt::print(", copies in from pinned host memory {:.1f} GB/s",
                       gpu_copy_bandwidth(index, static_cast<size_t>(std::min<int64_t>(g.free_bytes / 8, int64_t{256} << 20))));
        }
        fmt::print("\n");
        ++index;
    }
    return 0;
}

}  // namespace strata
