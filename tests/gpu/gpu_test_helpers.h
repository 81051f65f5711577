// What the kernel tests of tests/gpu share: a runtime call that must succeed, and the
// device to run on.
#pragma once
#include <catch2/catch.hpp>

#include "engine/backend/device.h"
#include "kernels/cuda/compat.h"

#define GPU_REQUIRE(call)                                             \
    do {                                                              \
        const gpuError_t e_ = (call);                                 \
        INFO(#call << ": " << gpuGetErrorString(e_));                 \
        REQUIRE(e_ == gpuSuccess);                                    \
    } while (0)

namespace strata::gpu {

// Device 0 made current; false (with a warning) where no device is present.
inline bool start_device() {
    if (gpu_device_count() == 0) {
        WARN("no GPU device: skipped");
        return false;
    }
    GPU_REQUIRE(gpuSetDevice(0));
    return true;
}

}  // namespace strata::gpu
