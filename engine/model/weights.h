// Binds GGUF tensors to typed weight views, checking each shape against what the
// architecture expects. Matrices stay in the mapping (any block type); vectors (norms,
// biases, small per-head parameters) are copied out as f32. Each stage later prepares
// the matrices and vectors of its layers for its device (Model::bind, Ops::prepare_weight,
// Ops::prepare_vector).
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/backend/placer.h"
#include "engine/core/error.h"
#include "engine/gguf/reader.h"
#include "engine/quant/mat_view.h"

namespace strata {

// A weight vector (norm weights, a bias, per-head parameters, conv taps) as f32: the
// values the file holds, and once a stage has prepared it, their copy in the memory of
// the stage's device (WeightPlacer::vector). Ops read data(), the device's copy.
class WeightVec {
public:
    WeightVec() = default;
    // NOLINTNEXTLINE(google-explicit-constructor): what WeightBinder::vec returns
    WeightVec(std::vector<float> v) : host_(std::make_shared<const std::vector<float>>(std::move(v))) {}

    // Copies of a WeightVec (one per stage that binds the layer) share the host values.
    void prepare(WeightPlacer& p) {
        if (!empty()) dev_ = p.vector(*host_);
    }
    const float* data() const {
        STRATA_CHECK(dev_ || empty(), "a weight vector was used before its stage prepared it");
        return dev_;
    }
    bool empty() const { return !host_ || host_->empty(); }
    size_t size() const { return host_ ? host_->size() : 0; }

private:
    std::shared_ptr<const std::vector<float>> host_;
    const float* dev_ = nullptr;  // memory of the Ops that prepared it
};

class WeightBinder {
public:
    // bound: where the names of the tensors read are recorded (Model::check_bound).
    WeightBinder(const GgufFile& f, std::set<std::string>& bound) : f_(f), bound_(bound) {}

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
    std::set<std::string>& bound_;
};

}  // namespace strata
