#include "engine/model/weights.h"

#include <algorithm>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/matmul.h"  // pack_weights: moves to the CPU backend's prepare_weight

namespace strata {

namespace {
constexpr size_t kChunk = size_t{64} << 20;
}  // namespace

void* WeightStore::alloc(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (chunks_.empty() || used_ + bytes > chunks_.back().size()) {
        chunks_.emplace_back(std::max(kChunk, bytes));  // untouched pages cost nothing
        used_ = 0;
    }
    void* out = chunks_.back().data() + used_;
    used_ += bytes;
    used_total_ += bytes;
    return out;
}

const GgufTensorInfo& WeightBinder::get(const std::string& name, std::initializer_list<int64_t> shape) const {
    const GgufTensorInfo& t = f_.tensor(name);
    std::array<int64_t, 4> want{1, 1, 1, 1};
    size_t i = 0;
    for (int64_t d : shape) want[i++] = d;
    if (t.ne != want) {
        std::string ws = "[";
        for (size_t j = 0; j < shape.size(); ++j) ws += fmt::format("{}{}", j ? ", " : "", want[j]);
        fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, t.shape_string(), ws + "]");
    }
    if (!type_info(t.type).supported)
        fail("{}: tensor '{}' has type {}, which Strata cannot compute with yet", f_.path(), name, type_info(t.type).name);
    return t;
}

MatView WeightBinder::packed(MatView v) const {
    const size_t n = packed_size(v);
    if (!store_ || n == 0 || v.packed) return v;
    void* dst = store_->alloc(n);
    pack_weights(v, dst);
    v.packed = dst;
    return v;
}

MatView WeightBinder::mat(const std::string& name, int64_t n_in, int64_t n_out, bool pack) const {
    const GgufTensorInfo& t = get(name, {n_in, n_out});
    const MatView v{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)};
    return pack ? packed(v) : v;
}

std::vector<MatView> WeightBinder::experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const {
    const GgufTensorInfo& t = get(name, {n_in, n_out, n_expert});
    const size_t rb = row_bytes(t.type, n_in);
    std::vector<MatView> out;
    for (int64_t e = 0; e < n_expert; ++e)
        out.push_back(packed(MatView{t.type, t.data + static_cast<size_t>(e * n_out) * rb, n_in, n_out, rb}));
    return out;
}

std::vector<float> WeightBinder::vec(const std::string& name, int64_t n) const {
    return small(name, n, 1);
}

std::vector<float> WeightBinder::small(const std::string& name, int64_t a, int64_t b) const {
    const GgufTensorInfo& t = get(name, {a, b});
    std::vector<float> out(static_cast<size_t>(a * b));
    const size_t rb = row_bytes(t.type, a);
    for (int64_t r = 0; r < b; ++r) dequantize_row(t.type, t.data + static_cast<size_t>(r) * rb, out.data() + r * a, a);
    return out;
}

}  // namespace strata
