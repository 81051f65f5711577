// Binds GGUF tensors to typed weight views, checking each shape against what the
// architecture expects. Matrices stay in the mapping (any block type); vectors (norms,
// biases, small per-head parameters) are copied out as f32. Matrices of a type with a
// packed layout (kernels/cpu/matmul.h: pack_weights) also get a packed copy in the
// model's WeightStore, which matmul reads instead.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/huge_buffer.h"
#include "engine/gguf/reader.h"
#include "engine/quant/mat_view.h"

namespace strata {

// Memory for a model's packed weights: a few large anonymous mappings, with transparent
// huge pages where the system allows them (madvise). Decode streams every weight once per
// token; 2 MiB pages spare it a TLB miss, and a stop of the hardware prefetcher, every
// 4 KiB (about a fifth of the bandwidth on the machine of docs/benchmarks.md).
class WeightStore {
public:
    WeightStore() = default;
    WeightStore(const WeightStore&) = delete;
    WeightStore& operator=(const WeightStore&) = delete;

    void* alloc(size_t bytes);  // 64-byte aligned, lives as long as the store
    size_t bytes() const { return used_total_; }

private:
    std::vector<HugeBuffer> chunks_;  // 64 MiB, or one large matrix each
    size_t used_ = 0;  // in the last chunk
    size_t used_total_ = 0;
};

class WeightBinder {
public:
    // store: where packed copies go; null: no packing (matmul reads the rows).
    explicit WeightBinder(const GgufFile& f, WeightStore* store = nullptr) : f_(f), store_(store) {}

    bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
    // A 2-D matrix with ggml shape {n_in, n_out} (trailing 1s allowed). pack = false: rows
    // only (a table read by row, such as a token embedding that is not also the head).
    MatView mat(const std::string& name, int64_t n_in, int64_t n_out, bool pack = true) const;
    // v with a packed copy added (when its type has a layout and the binder a store).
    MatView packed(MatView v) const;
    // Expert e of a 3-D stack {n_in, n_out, n_expert}.
    std::vector<MatView> experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const;
    // A vector of n values (any float type), as f32. Shapes {n} and {n, 1} are both accepted.
    std::vector<float> vec(const std::string& name, int64_t n) const;
    // A small 2-D tensor {a, b} as f32, row-major (b rows of a values).
    std::vector<float> small(const std::string& name, int64_t a, int64_t b) const;

private:
    const GgufTensorInfo& get(const std::string& name, std::initializer_list<int64_t> shape) const;
    const GgufFile& f_;
    WeightStore* store_;
};

}  // namespace strata
