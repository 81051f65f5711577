#include "engine/backend/placer.h"

#include <cstring>

#include "engine/quant/types.h"

namespace strata {

size_t BlockPlacer::take(size_t bytes) {
    const size_t at = off_;
    off_ += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
}

MatView BlockPlacer::weight(const MatView& w) {
    if (!w.data) return w;
    const Key key{w.data, static_cast<int>(w.type), w.n_in, w.n_out, false};
    auto it = seen_.find(key);
    const size_t at = it != seen_.end() ? it->second : take(ops_.weight_bytes(w));
    if (it == seen_.end()) {
        seen_[key] = at;
        if (host_) ops_.write_weight(w, host_ + at);
    }
    return base_ ? ops_.weight_at(w, base_ + at) : w;
}

MatView BlockPlacer::table(const MatView& t) {
    // Rows as the file has them, on every backend (get_rows dequantizes a row at a time).
    const size_t rb = row_bytes(t.type, t.n_in);
    const Key key{t.data, static_cast<int>(t.type), t.n_in, t.n_out, true};
    auto it = seen_.find(key);
    const size_t at = it != seen_.end() ? it->second : take(rb * static_cast<size_t>(t.n_out));
    if (it == seen_.end()) {
        seen_[key] = at;
        if (host_) copy_rows(t, host_ + at);
    }
    return base_ ? MatView{t.type, base_ + at, t.n_in, t.n_out, rb, nullptr} : t;
}

const float* BlockPlacer::vector(std::span<const float> v) {
    const size_t at = take(v.size_bytes());
    if (host_) std::memcpy(host_ + at, v.data(), v.size_bytes());
    return base_ ? reinterpret_cast<const float*>(base_ + at) : v.data();
}

}  // namespace strata
