#include "engine/core/huge_buffer.h"

#include <sys/mman.h>

#include <utility>

#include "engine/core/error.h"

namespace strata {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
constexpr size_t kHugeFrom = size_t{1} << 20;  // smaller buffers keep small pages (a huge page would be mostly empty)
}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    const bool huge = bytes >= kHugeFrom;
    map_size_ = huge ? (bytes + kHuge - 1) / kHuge * kHuge + kHuge : bytes;  // + slack to align
    map_ = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        fail("cannot map {} MiB", (bytes + (1 << 20) - 1) >> 20);
    }
    data_ = static_cast<uint8_t*>(map_);
    if (huge) {
        const auto addr = reinterpret_cast<uintptr_t>(map_);
        data_ += (kHuge - addr % kHuge) % kHuge;
        madvise(data_, map_size_ - static_cast<size_t>(data_ - static_cast<uint8_t*>(map_)), MADV_HUGEPAGE);  // a hint
    }
}

HugeBuffer::~HugeBuffer() {
    if (map_) munmap(map_, map_size_);
}

void HugeBuffer::swap(HugeBuffer& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(map_size_, o.map_size_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
}

}  // namespace strata
