// An op set that computes nothing: the model's code runs its window over it to learn how
// much memory the window asks for (Model::window_bytes, for the placement planner), as a
// graph allocator measures a graph without running it. Its memory is untouched host
// memory (mapped, never written, so it costs no pages); the model never reads device
// memory on the host, so nothing depends on what the ops would have written.
#pragma once
#include <cstring>

#include "engine/backend/ops.h"

namespace strata {

class MeasureOps final : public Ops {
public:
    std::string_view name() const override { return "measure"; }
    Buffer alloc(size_t bytes) override {
        return meter_.metered(bytes, "alloc", [bytes] { return host_buffer(bytes); });
    }
    Buffer alloc_staging(size_t bytes) override { return host_buffer(bytes); }
    bool host_memory() const override { return false; }
    void to_device(void*, const void*, size_t) override {}
    void to_host(void*, const void*, size_t) override {}
    MatView prepare_weight(const MatView& w) override { return w; }
    MatView prepare_table(const MatView& t) override { return t; }
    const float* prepare_vector(std::span<const float> v) override { return v.data(); }
    size_t weight_bytes(const MatView&) override { return 0; }
    void write_weight(const MatView&, void*) override {}
    MatView weight_at(const MatView& w, const void*) override { return w; }
    uint64_t copy_in_async(void*, const void*, size_t) override { return 1; }
    void await_copy(uint64_t) override {}

    void get_rows(const MatView&, const int32_t*, Tensor) override {}
    void rms_norm(Tensor, const float*, float, Tensor) override {}
    void rms_norm_gated(Tensor, Tensor, const float*, int64_t, float) override {}
    void l2_norm(Tensor, int64_t, int64_t, int64_t, float, float) override {}
    void add(Tensor, Tensor) override {}
    void swiglu(Tensor, Tensor, Tensor) override {}
    void copy(Tensor, Tensor) override {}
    void zero(Tensor) override {}
    void matmul(const MatView&, Tensor, Tensor) override {}
    void matmul_multi(std::span<const MatOut>, Tensor) override {}
    void norm_rope(const Batch&, std::span<const RopeHeads>, int64_t, float, const RopeParams&) override {}
    void kv_store(const Batch&, int64_t, Tensor, Tensor) override {}
    void attention(const Batch&, int64_t, const AttnDims&, Tensor, int64_t, bool, Tensor) override {}
    void gdn_gates(const GdnDims&, Tensor, const float*, const float*, Tensor, Tensor) override {}
    void conv1d_silu(const GdnDims&, Tensor, const float*, float*, Tensor) override {}
    void gdn_recurrent(const GdnDims&, Tensor, Tensor, Tensor, float*, Tensor) override {}
    void gdn_chunked(const GdnDims&, Tensor, Tensor, Tensor, float*, Tensor, int64_t) override {}
    void topk_softmax(Tensor, int64_t, int32_t*, float*) override {}
    // false: the model then measures the shared expert's own ops, the most a backend may ask.
    bool moe_experts(std::span<const MatView>, std::span<const MatView>, std::span<const MatView>, const int32_t*,
                     int64_t, Tensor, Tensor, const SharedExpert*) override {
        return false;
    }
    void moe_combine(Tensor, const float*, int64_t, Tensor, const float*, Tensor, Tensor) override {}
    void handoff_publish(Tensor, Handoff&, uint64_t, bool) override {}
    std::optional<Tensor> handoff_wait(Handoff&, uint64_t, int64_t, Tensor x) override { return x; }
};

}  // namespace strata
