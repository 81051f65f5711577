// Zeroed anonymous memory that asks for transparent huge pages (2 MiB) when it is large
// enough to fill some. Memory that is read between long streams of other memory (the KV
// cache between layers' weights, on a decode step) otherwise pays a page walk per 4 KiB:
// the weights' pages have pushed its translations out of the TLB.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata {

class HugeBuffer {
public:
    HugeBuffer() = default;
    explicit HugeBuffer(size_t bytes);  // throws strata::Error when the system has no memory
    ~HugeBuffer();
    HugeBuffer(HugeBuffer&& o) noexcept { swap(o); }
    HugeBuffer& operator=(HugeBuffer&& o) noexcept {
        swap(o);
        return *this;
    }
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    uint8_t* data() { return data_; }
    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    void swap(HugeBuffer& o) noexcept;
    void* map_ = nullptr;
    size_t map_size_ = 0;
    uint8_t* data_ = nullptr;  // 2 MiB aligned when huge pages were asked for
    size_t size_ = 0;
};

}  // namespace strata
