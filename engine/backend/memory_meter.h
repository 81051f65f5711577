// What a device's memory holds, counted where it is allocated (Ops::alloc and the
// backend's own weight copies): bytes in use, their peak, and an optional limit (the
// stage's --max-vram budget). An allocation past the limit is refused with an error
// that says how much was asked and what is in use, before the device is asked at all,
// so a budget is a promise the tests can check (peak() <= limit()).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/buffer.h"
#include "engine/core/error.h"

namespace strata {

class MemoryMeter {
public:
    void set_limit(int64_t bytes) { limit_ = bytes; }  // 0 = none
    int64_t limit() const { return limit_; }
    int64_t used() const { return used_.load(std::memory_order_relaxed); }
    int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
    void reset_peak() { peak_.store(used(), std::memory_order_relaxed); }

    // Counts `bytes` more, or throws (nothing counted) when that would pass the limit.
    void charge(size_t bytes, const char* what) {
        const auto n = static_cast<int64_t>(bytes);
        int64_t now = used_.fetch_add(n, std::memory_order_relaxed) + n;
        if (limit_ > 0 && now > limit_) {
            used_.fetch_sub(n, std::memory_order_relaxed);
            fail("the device's memory budget of {:.1f} MiB would be exceeded: {:.1f} MiB in use, {:.1f} MiB more "
                 "asked for ({})",
                 mib(limit_), mib(now - n), mib(n), what);
        }
        int64_t p = peak_.load(std::memory_order_relaxed);
        while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
        }
    }
    void release(size_t bytes) { used_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed); }

    // make() (a Buffer of `bytes`), counted here until it is freed; charged before make
    // runs, so a budget refuses before the device is asked.
    template <typename Make>
    Buffer metered(size_t bytes, const char* what, Make&& make) {
        charge(bytes, what);
        std::shared_ptr<Buffer> held;
        try {
            held = std::make_shared<Buffer>(make());
        } catch (...) {
            release(bytes);
            throw;
        }
        void* p = held->data();
        return Buffer(p, bytes, [this, held, bytes](void*) mutable {
            held.reset();
            release(bytes);
        });
    }

    static double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

private:
    int64_t limit_ = 0;
    std::atomic<int64_t> used_{0}, peak_{0};
};

}  // namespace strata
