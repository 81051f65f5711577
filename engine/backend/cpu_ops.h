// The CPU backend of the op set (engine/backend/ops.h): each op runs as it is called,
// on the device's thread pool, through the kernels of kernels/cpu/. The buffers an op
// needs beyond its arguments are members, grown once and reused: no thread_local state,
// so the same CpuOps serves whichever thread drives its device.
#pragma once
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "engine/backend/op_profile.h"
#include "engine/backend/ops.h"
#include "engine/backend/work_queue.h"
#include "engine/backend/weight_store.h"
#include "engine/core/thread_pool.h"
#include "kernels/cpu/moe_ffn.h"

namespace strata {

class CpuOps final : public Ops {
public:
    // host_memory = false: behave as a device with memory of its own (copies at a
    // window's edges, the hand-in copied into the stage's buffer), so tests run the path
    // a GPU takes on the CPU (STRATA_TEST_DEVICE_COPIES).
    explicit CpuOps(ThreadPool& pool, bool host_memory = true) : pool_(pool), host_memory_(host_memory) {}
    std::string_view name() const override { return "cpu"; }
    ThreadPool& pool() { return pool_; }
    size_t prepared_bytes() const { return store_.bytes(); }  // packed copies made so far

    Buffer alloc(size_t bytes) override {
        return meter_.metered(bytes, "alloc", [bytes] { return host_buffer(bytes); });
    }
    Buffer alloc_staging(size_t bytes) override { return host_buffer(bytes); }
    bool host_memory() const override { return host_memory_; }
    void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    MatView prepare_weight(const MatView& w) override;
    MatView prepare_table(const MatView& t) override;
    const float* prepare_vector(std::span<const float> v) override;
    size_t weight_bytes(const MatView& w) override;
    void write_weight(const MatView& w, void* host) override;
    MatView weight_at(const MatView& w, const void* at) override;
    uint64_t copy_in_async(void* dst, const void* src, size_t bytes) override;
    void await_copy(uint64_t ticket) override;

    void get_rows(const MatView& table, const int32_t* ids, Tensor x) override;
    void rms_norm(Tensor x, const float* w, float eps, Tensor y) override;
    void rms_norm_gated(Tensor x, Tensor z, const float* w, int64_t head, float eps) override;
    void l2_norm(Tensor x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale) override;
    void add(Tensor y, Tensor x) override;
    void swiglu(Tensor g, Tensor u, Tensor y) override;
    void copy(Tensor dst, Tensor src) override;
    void zero(Tensor dst) override;

    void matmul(const MatView& w, Tensor x, Tensor y) override;
    void matmul_multi(std::span<const MatOut> outs, Tensor x) override;

    void norm_rope(const Batch& batch, std::span<const RopeHeads> sets, int64_t head_dim, float eps,
                   const RopeParams& rope) override;
    void kv_store(const Batch& batch, int64_t il, Tensor k, Tensor v) override;
    void attention(const Batch& batch, int64_t il, const AttnDims& d, Tensor q, int64_t head_stride, bool gated,
                   Tensor out) override;

    void gdn_gates(const GdnDims& d, Tensor ba, const float* a, const float* dt_bias, Tensor beta, Tensor g) override;
    void conv1d_silu(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) override;
    void gdn_recurrent(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o) override;
    void gdn_recurrent_from(const GdnDims& d, Tensor u, Tensor g, Tensor beta, const float* state_in, float* state,
                            Tensor o) override;
    bool state_reads_elsewhere() const override { return true; }
    void gdn_chunked(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o,
                     int64_t chunk) override;

    void topk_softmax(Tensor logits, int64_t k, int32_t* ids, float* wt) override;
    bool moe_experts(std::span<const MatView> gate, std::span<const MatView> up, std::span<const MatView> down,
                     const int32_t* ids, int64_t k, Tensor h, Tensor routed, const SharedExpert* shared) override;
    void moe_combine(Tensor routed, const float* wt, int64_t k, Tensor shared, const float* shared_gate, Tensor h,
                     Tensor out) override;

    void handoff_publish(Tensor x, Handoff& h, uint64_t window, bool drop) override;
    std::optional<Tensor> handoff_wait(Handoff& h, uint64_t window, int64_t timeout_ms, Tensor x) override;

    // STRATA_CPU_PROFILE: time every op (op_profile.h); profile() is the table so far.
    void set_profile(bool on);
    std::string profile() const override;

private:
    void row_seqs(const Batch& batch);  // row_seq_: row -> index of its sequence in the batch

    ThreadPool& pool_;
    bool host_memory_;
    WeightStore store_;  // packed copies (prepare_weight) and tables' rows (prepare_table)
    WeightStore vectors_;  // prepare_vector's copies (a few KiB a layer)
    // The copy made for each weight (its rows, type and shape), so a matrix a stage binds
    // twice (a head the MTP block shares) is packed once.
    std::map<std::tuple<const void*, int, int64_t, int64_t>, const void*> packed_of_;
    std::map<std::tuple<const void*, int, int64_t, int64_t>, const void*> table_of_;  // prepare_table's copies
    // The copy queue (copy_in_async): a thread of its own, started on the first copy, so
    // a streamed layer's weights arrive while the pool computes the layer before it.
    std::unique_ptr<WorkQueue> copier_;
    std::map<uint64_t, DeviceEvent> copies_;  // tickets not yet awaited
    uint64_t next_ticket_ = 0;
    std::vector<int32_t> row_seq_;
    std::vector<float> cs_;          // rope angles of one row
    std::vector<int64_t> runs_;      // attention: first row of each run, then the row count
    std::vector<float> conv_in_;     // conv1d: [K - 1 + n, conv_dim]
    std::vector<int32_t> order_, start_, next_;  // moe: rows grouped by expert
    std::vector<int32_t> tok_;                   // moe: the token of each of those rows
    std::vector<ExpertFfn> ffn_;                 // moe: a window's experts, one task each
    std::vector<float> ge_, ue_, ye_;            // moe: the experts' rows
    std::vector<MatIn> ins_;                     // moe: the experts' rows (one input per expert)
    std::vector<MatOut> outs_;                   // moe: their gate and up, or their down
    std::vector<int> in_of_;                     // moe: the input each output reads
    std::unique_ptr<OpProfile> profile_;          // null: not profiling

    OpTimer timed(const char* op, int64_t rows, std::string what = {}) {
        return OpTimer(profile_.get(), op, rows, std::move(what));
    }
};

}  // namespace strata
