// Device copies of the IQ codebooks: one allocation and one copy per device, made on first
// use and kept for the process (every GpuOps of a device shares them).
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/iq_grids.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {
namespace {

void check(gpuError_t e, const char* what) {
    if (e != gpuSuccess) fail("upload_iq_tables: {}: {}", what, gpuGetErrorString(e));
}

IqTables upload() {
    struct Part {
        const void* src;
        size_t bytes;
    };
    // One buffer; every size is a multiple of 8 bytes, so each table starts aligned.
    const Part parts[] = {
        {iq::kIq2xxsGrid.data(), sizeof iq::kIq2xxsGrid}, {iq::kIq2xsGrid.data(), sizeof iq::kIq2xsGrid},
        {iq::kIq2sGrid.data(), sizeof iq::kIq2sGrid},     {iq::kIq1sGrid.data(), sizeof iq::kIq1sGrid},
        {iq::kIq3xxsGrid.data(), sizeof iq::kIq3xxsGrid}, {iq::kIq3sGrid.data(), sizeof iq::kIq3sGrid},
        {iq::kSignsIq2xs.data(), sizeof iq::kSignsIq2xs},
    };
    size_t offset[std::size(parts)], total = 0;
    for (size_t i = 0; i < std::size(parts); ++i) {
        offset[i] = total;
        total += parts[i].bytes;
    }
    std::vector<uint8_t> host(total);
    for (size_t i = 0; i < std::size(parts); ++i)
        std::memcpy(host.data() + offset[i], parts[i].src, parts[i].bytes);

    void* dev = nullptr;
    check(gpuMalloc(&dev, total), "gpuMalloc");
    check(gpuMemcpyAsync(dev, host.data(), total, gpuMemcpyDefault, 0), "copy");
    check(gpuStreamSynchronize(0), "synchronize");  // `host` dies at return

    const auto* base = static_cast<const uint8_t*>(dev);
    IqTables t;
    t.iq2xxs = reinterpret_cast<const uint64_t*>(base + offset[0]);
    t.iq2xs = reinterpret_cast<const uint64_t*>(base + offset[1]);
    t.iq2s = reinterpret_cast<const uint64_t*>(base + offset[2]);
    t.iq1s = reinterpret_cast<const uint64_t*>(base + offset[3]);
    t.iq3xxs = reinterpret_cast<const uint32_t*>(base + offset[4]);
    t.iq3s = reinterpret_cast<const uint32_t*>(base + offset[5]);
    t.ksigns = base + offset[6];
    return t;
}

}  // namespace

IqTables upload_iq_tables() {
    static std::mutex mu;
    static std::map<int, IqTables> per_device;
    int dev = 0;
    check(gpuGetDevice(&dev), "gpuGetDevice");
    const std::lock_guard<std::mutex> lock(mu);
    auto it = per_device.find(dev);
    if (it == per_device.end()) it = per_device.emplace(dev, upload()).first;
    return it->second;
}

}  // namespace strata::gpu
