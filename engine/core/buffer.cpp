#include "engine/core/buffer.h"

#include "engine/core/huge_buffer.h"

namespace strata {

Buffer host_buffer(size_t bytes) {
    auto* m = new HugeBuffer(bytes);  // throws before anything is owned
    return Buffer(m->data(), bytes, [m](void*) { delete m; });
}

}  // namespace strata
