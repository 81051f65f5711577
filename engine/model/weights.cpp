#include "engine/model/weights.h"

#include <algorithm>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/quant/quant.h"

namespace strata {

const GgufTensorInfo& WeightBinder::get(const std::string& name, std::initializer_list<int64_t> shape) const {
    const GgufTensorInfo& t = f_.tensor(name);
    bound_.insert(name);
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

MatView WeightBinder::mat(const std::string& name, int64_t n_in, int64_t n_out) const {
    const GgufTensorInfo& t = get(name, {n_in, n_out});
    return MatView{t.type, t.data, n_in, n_out, row_bytes(t.type, n_in)};
}

std::vector<MatView> WeightBinder::experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const {
    const GgufTensorInfo& t = get(name, {n_in, n_out, n_expert});
    const size_t rb = row_bytes(t.type, n_in);
    std::vector<MatView> out;
    for (int64_t e = 0; e < n_expert; ++e)
        out.push_back(MatView{t.type, t.data + static_cast<size_t>(e * n_out) * rb, n_in, n_out, rb});
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
