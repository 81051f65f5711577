// Memory of one device, freed with its owner (RAII), and the allocator type through
// which code above the devices asks for it: a sequence's state and a window's buffers
// are allocated by the device that runs them (engine/backend/ops.h, Ops::alloc), so
// they are host memory on a CPU device and device memory on a GPU.
#pragma once
#include <cstddef>
#include <functional>

namespace strata {

class Buffer {
public:
    Buffer() = default;
    Buffer(void* p, size_t n, std::function<void(void*)> free_fn) : p_(p), n_(n), free_(std::move(free_fn)) {}
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept {
        if (this == &o) return *this;
        reset();
        p_ = o.p_;
        n_ = o.n_;
        free_ = std::move(o.free_);
        o.p_ = nullptr;
        o.n_ = 0;
        return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { reset(); }
    void* data() const { return p_; }
    size_t size() const { return n_; }

private:
    void reset() {
        if (p_ && free_) free_(p_);
        p_ = nullptr;
    }
    void* p_ = nullptr;
    size_t n_ = 0;
    std::function<void(void*)> free_;
};

// Zeroed memory of `bytes` bytes of one device, at least 64-byte aligned.
using Allocator = std::function<Buffer(size_t bytes)>;

// Zeroed host memory, page aligned, in 2 MiB pages when large (engine/core/huge_buffer.h):
// what a CPU device allocates. Throws strata::Error when the system has no memory.
Buffer host_buffer(size_t bytes);

}  // namespace strata
