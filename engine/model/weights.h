// Binds GGUF tensors to typed weight views, checking each shape against what the
// architecture expects. Matrices stay in the mapping (any block type); vectors (norms,
// biases, small per-head parameters) are copied out as f32. Each stage later prepares
// the matrices of its layers for its device (Model::bind, Ops::prepare_weight).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/gguf/reader.h"
#include "engine/quant/mat_view.h"

namespace strata {

class WeightBinder {
public:
    explicit WeightBinder(const GgufFile& f) : f_(f) {}

    bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
    // A 2-D matrix with ggml shape {n_in, n_out} (trailing 1s allowed).
    MatView mat(const std::string& name, int64_t n_in, int64_t n_out) const;
    // Expert e of a 3-D stack {n_in, n_out, n_expert}.
    std::vector<MatView> experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const;
    // A vector of n values (any float type), as f32. Shapes {n} and {n, 1} are both accepted.
    std::vector<float> vec(const std::string& name, int64_t n) const;
    // A small 2-D tensor {a, b} as f32, row-major (b rows of a values).
    std::vector<float> small(const std::string& name, int64_t a, int64_t b) const;

private:
    const GgufTensorInfo& get(const std::string& name, std::initializer_list<int64_t> shape) const;
    const GgufFile& f_;
};

}  // namespace strata
