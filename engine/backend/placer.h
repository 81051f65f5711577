// Where a stage's weights go as it binds them (Model::bind walks every weight of what it
// binds through a placer, in a fixed order).
//
// OpsPlacer: each weight prepared by the device's op set and kept where the backend
// keeps it (a stage without a budget). BlockPlacer: every weight walked into one block
// of device memory, laid out in walk order, so a layer becomes one copyable segment: a
// first walk with no base sums its bytes; a walk with a base returns the views there,
// writing each weight's form into `host` at the same offsets when given (then one copy
// puts the block in place). Walking the same layer again with another base gives the
// views of a copy of the block there (a streamed layer's slot).
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <tuple>

#include "engine/backend/ops.h"

namespace strata {

class WeightPlacer {
public:
    virtual ~WeightPlacer() = default;
    // A matmul weight; one with null data (a layout the file does not use) comes back as is.
    virtual MatView weight(const MatView& w) = 0;
    virtual MatView table(const MatView& t) = 0;  // read by rows (get_rows)
    virtual const float* vector(std::span<const float> v) = 0;

    // Where the expert stacks of MoE layer il go when they stay in host memory
    // (--cpu-moe: the host's own placer); null: with the rest of the layer.
    WeightPlacer* host_experts(int64_t il) const { return host_experts_ ? host_experts_(il) : nullptr; }
    void set_host_experts(std::function<WeightPlacer*(int64_t)> f) { host_experts_ = std::move(f); }

private:
    std::function<WeightPlacer*(int64_t)> host_experts_;
};

class OpsPlacer final : public WeightPlacer {
public:
    explicit OpsPlacer(Ops& ops) : ops_(ops) {}
    MatView weight(const MatView& w) override { return w.data ? ops_.prepare_weight(w) : w; }
    MatView table(const MatView& t) override { return ops_.prepare_table(t); }
    const float* vector(std::span<const float> v) override { return ops_.prepare_vector(v); }

private:
    Ops& ops_;
};

class BlockPlacer final : public WeightPlacer {
public:
    // base: where the block lies in the device's memory (null: only count); host: where
    // to write the weights' forms (null: the block is there already).
    BlockPlacer(Ops& ops, const void* base, void* host) : ops_(ops), base_(static_cast<const std::byte*>(base)), host_(static_cast<std::byte*>(host)) {}
    MatView weight(const MatView& w) override;
    MatView table(const MatView& t) override;
    const float* vector(std::span<const float> v) override;
    size_t bytes() const { return off_; }  // the block's size so far

    static constexpr size_t kAlign = 256;  // every piece starts on a GPU's allocation alignment

private:
    // Offset of a weight walked already in this block (a head the MTP block shares): placed once.
    using Key = std::tuple<const void*, int, int64_t, int64_t, bool>;
    size_t take(size_t bytes);
    Ops& ops_;
    const std::byte* base_;
    std::byte* host_;
    size_t off_ = 0;
    std::map<Key, size_t> seen_;
};

}  // namespace strata
