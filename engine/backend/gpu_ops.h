// The GPU backend of the op set (engine/backend/ops.h): each op queues its kernels
// (kernels/cuda/, through kernels/cuda/gpu.h) on the device's stream and returns; the
// host waits only where a result must reach it (to_host, the end of a hand-in) and at
// the queue's events. A window's inputs go in through pinned staging without a wait
// (to_device), and get_rows' id check reaches the host at the next wait, so the host
// queues a whole window without stopping (the model checks its token ids on the host
// before they go in: ForwardCtx::in_ids). Built when the build has a GPU backend
// (CUDA, HIP, or HIP on the CPU for tests here).
#pragma once
#include <map>
#include <optional>
#include <tuple>
#include <variant>
#include <vector>

#include "engine/backend/ops.h"
#include "kernels/cuda/gpu.h"

namespace strata {

class GpuOps final : public Ops {
public:
    // graphs: a window's kernels collected and replayed as a graph (kernels/cuda/graph.cu)
    // while item_begin .. item_end brackets it (the device's queue does). profile: each
    // the host's time in queue items and waits measured, and without graphs each kernel
    // timed (kernels/cuda/profiler.h).
    GpuOps(int device, bool graphs, bool profile = false);
    ~GpuOps() override;
    GpuOps(const GpuOps&) = delete;
    GpuOps& operator=(const GpuOps&) = delete;

    std::string_view name() const override { return gpu::backend_name(); }
    int device() const { return dev_; }
    void sync();  // waits for every queued kernel; throws the first error
    // The device queue's item: what the ops launch between these two is collected and
    // issued at item_end (or at a wait before it), as a graph where one fits.
    void item_begin();
    void item_end();
    GraphCounts graph_counts() const override;
    std::string profile() const override;

    Buffer alloc(size_t bytes) override;
    bool host_memory() const override { return false; }
    void to_device(void* dst, const void* src, size_t bytes) override;
    void to_host(void* dst, const void* src, size_t bytes) override;
    MatView prepare_weight(const MatView& w) override;
    MatView prepare_table(const MatView& t) override { return prepare_weight(t); }
    const float* prepare_vector(std::span<const float> v) override;
    Buffer alloc_staging(size_t bytes) override;
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

    int64_t scratch_bytes(const WindowShape& w) const override;
    void matmul(const MatView& w, Tensor x, Tensor y) override;
    void matmul_multi(std::span<const MatOut> outs, Tensor x) override;

    void norm_rope(const Batch& batch, std::span<const RopeHeads> sets, int64_t head_dim, float eps,
                   const RopeParams& rope) override;
    void kv_store(const Batch& batch, int64_t il, Tensor k, Tensor v) override;
    void attention(const Batch& batch, int64_t il, const AttnDims& d, Tensor q, int64_t head_stride, bool gated,
                   Tensor out) override;

    void gdn_gates(const GdnDims& d, Tensor ba, const float* a, const float* dt_bias, Tensor beta, Tensor g) override;
    void conv1d_silu(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) override;
    void gdn_conv(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) override;
    void gdn_recurrent(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o) override;
    void gdn_chunked(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o,
                     int64_t chunk) override;

    void topk_softmax(Tensor logits, int64_t k, int32_t* ids, float* wt) override;
    bool moe_experts(std::span<const MatView> gate, std::span<const MatView> up, std::span<const MatView> down,
                     const int32_t* ids, int64_t k, Tensor h, Tensor routed, const SharedExpert* shared) override;
    void moe_combine(Tensor routed, const float* wt, int64_t k, Tensor shared, const float* shared_gate, Tensor h,
                     Tensor out) override;

    void handoff_publish(Tensor x, Handoff& h, uint64_t window, bool drop) override;
    std::optional<Tensor> handoff_wait(Handoff& h, uint64_t window, int64_t timeout_ms, Tensor x) override;
    bool hand_in_failed(const Handoff& h) override;

private:
    // The calling thread's current device, at the start of each op. bind() forgets fused_
    // (the op may write any memory); an op that writes only what it names calls
    // bind_keeping() and overwrites() for each output.
    void bind() {
        bind_keeping();
        fused_.reset();
    }
    void bind_keeping() {
        gpu::set_device(dev_);
        flush_held();
    }
    void overwrites(const void* p, size_t bytes);
    void overwrites(gpu::Rows y) {
        if (y.rows > 0) overwrites(y.p, sizeof(float) * static_cast<size_t>((y.rows - 1) * y.ld + y.cols));
    }
    // The host waits for the stream; then a bad id found by a get_rows since the last
    // wait is the strata::Error it would have thrown.
    void wait_stream();
    // The next `bytes` (<= kStageHalf) of to_device's pinned staging, switching halves
    // (after the other half's copies are done) when the current one is full or a new
    // batch of collected work begins (so that a window's copies read the same addresses
    // each time its half comes round: a graph's replay).
    uint8_t* stage(size_t bytes);
    // bytes of host data as device memory, copied in (queued) for the kernels after it: a
    // window's changing values (positions, window numbers) read by kernels whose launch
    // stays the same. Offsets restart with each batch of collected work.
    const void* param(const void* data, size_t bytes);
    void flushed();  // the recorder issued a batch: its staging event, fresh offsets
    // Runs wait() (a call that waits for the device); the profile counts its time as waiting.
    template <typename F>
    void count_wait(F&& wait);
    void copy_now(void* dst, const void* src, size_t bytes);  // never collected (pageable host memory)
    // The SeqTables of the batch (kMaxSeqs sequences each) with layer il's KV cache (when
    // with_kv), their positions uploaded once per batch of collected work.
    template <typename F>
    void for_seq_tables(const Batch& batch, int64_t il, bool with_kv, F&& f);
    void* keep(size_t bytes);                     // device memory that lives as long as this
    float* scratch(size_t i, size_t floats);      // a reusable device buffer
    // x quantized for integer dot products into scratch slot `slot` (queued on the stream),
    // or the rows of fused_ that are x.
    gpu::ActQ quantized(gpu::Rows x, size_t slot);
    // A tensor's quantized form, made by the op that wrote it (rms_norm, rms_norm_gated,
    // swiglu, attention with the quantizer in their kernel: gpu::rms_norm_q...) in slot kFusedSlot, for
    // windows of up to kFuseRows rows (decode and verify windows, whose quantize_act
    // launches cost more than their work); the integer products of those rows take it.
    struct Fused {
        gpu::Rows x;
        gpu::ActQ q;
    };
    std::optional<Fused> fused_;
    // A residual add of a window of up to kFuseRows rows, held until the next op (or the
    // queue item's end) issues it: an RMS norm of its sum takes it into its own kernel
    // (gpu::add_rms_norm_q), as a layer's two adds are followed by norms.
    // A MoE layer's down product of such a window (by id, the shared expert's rows with
    // it), held for the combine of its rows, which takes it along: the norm after the add
    // then issues all four in one kernel (gpu::matmul_ids_combine_add_rms_norm_q).
    struct PendingDown {
        GgmlType type;
        const uint8_t* const* table;
        int64_t n_in, n_out;
        size_t stride;
        const int32_t* ids;
        gpu::ActQ x;
        gpu::Rows out;  // the routed rows, then the shared ones' (ex.y)
        gpu::IdsExtra ex;
    };
    // A MoE layer's combine (decode and verify windows), held likewise: the residual add
    // of its output takes it along, and the norm after that issues all three in one
    // kernel (gpu::moe_combine_add_rms_norm_q).
    struct PendingCombine {
        gpu::MoeCombine c;
        gpu::Rows out;
        std::optional<PendingDown> down;  // c's rows, not yet computed
    };
    // An integer product of up to gpu::kNormProductRows rows (a decode step's or a verify
    // window's out projection or down product), held likewise: the residual add of its
    // output takes it along, and the norm after that issues the three in one kernel
    // (gpu::matmul_add_rms_norm_q).
    struct PendingProduct {
        gpu::Weight w;
        gpu::ActQ x;
        gpu::Rows y;
    };
    struct PendingAdd {
        gpu::Rows y, x;
        std::optional<PendingCombine> combine;  // x's values, not yet computed
        std::optional<PendingProduct> product;  // likewise
    };
    // A GDN layer's gates (gdn_gates), held the same way for the recurrence of the same
    // rows, whose kernel then computes and stores them (one launch fewer per GDN layer);
    // the conv step between them leaves them held, any other op issues them first.
    struct PendingGates {
        gpu::Rows ba, beta, g;
        int64_t nk, nv;
        bool tiled;
        const float* a;
        const float* dt_bias;
    };
    // A GDN recurrence of a window of up to kFuseRows rows (with its gates, if held), held
    // for the gated norm of its output, which its kernel then runs (gpu::gdn_recurrent's
    // norm): one launch per GDN layer fewer.
    struct PendingRecurrent {
        GdnDims d;
        gpu::Rows u, g, beta;
        float* state;
        gpu::Rows o;
        gpu::GdnGateArgs gates;
    };
    // A product of float weights (a MoE router's) of a window of up to kFuseRows rows,
    // held likewise: top-k routing of its output launches both (gpu::matmul_topk), one
    // launch per MoE layer fewer.
    struct PendingRouter {
        gpu::Weight w;
        gpu::Rows x, y;
    };
    // An attention layer's norm and rotation of q and k (one table of sequences), held for
    // the KV store of the same rows, which then launches both (gpu::norm_rope_kv_store).
    struct PendingRope {
        gpu::SeqTable t;  // norm_rope's (positions, no caches)
        gpu::RopeArgs a;
    };
    // The work held (one item at most: each op that holds work first issues what was held,
    // bar the item it takes along), and each item's own launch where nothing took it.
    using Held = std::variant<std::monostate, PendingCombine, PendingProduct, PendingAdd, PendingGates,
                              PendingRecurrent, PendingRouter, PendingRope, PendingDown>;
    Held held_;
    template <typename P>
    P* held() {
        return std::get_if<P>(&held_);
    }
    // The held item if it is a P (no longer held then).
    template <typename P>
    std::optional<P> take() {
        std::optional<P> p;
        if (P* h = held<P>()) p = *h, held_ = std::monostate{};
        return p;
    }
    void flush_held();
    void issue(std::monostate) {}
    void issue(const PendingCombine& c);
    void issue(const PendingProduct& p);
    void issue(const PendingAdd& a);
    void issue(const PendingGates& g);
    void issue(const PendingRecurrent& r);
    void issue(const PendingRouter& r);
    void issue(const PendingRope& r);
    void issue(const PendingDown& d);
    static constexpr int64_t kFuseRows = 16;
    static bool fuses(const gpu::Rows& y) { return y.rows > 0 && y.rows <= kFuseRows && y.cols % 32 == 0; }
    void* fused_scratch(const gpu::Rows& y);
    static constexpr size_t kActSlot = 2;  // 0 and 1: moe_experts' gate and up rows
    static constexpr size_t kAttnSlot = 3;  // attention's partial sums
    static constexpr size_t kGroupSlot = 4;  // moe_experts' rows by expert (ints)
    static constexpr size_t kFusedSlot = 5;  // fused_'s digits
    static constexpr size_t kSwigluSlot = 6;  // moe_experts' SwiGLU digits made with gate and up
    static constexpr size_t kCounterSlot = 7;  // counters()
    static constexpr size_t kNormSlot = 8;  // the digits of matmul_add_rms_norm_q's norm
    // Whether a's digits lie in scratch slot i.
    bool in_slot(const gpu::ActQ& a, size_t i) const;
    // n device unsigneds, 0 between kernels (each kernel that counts in them leaves them
    // so): the block counters of gpu::matmul_ids_swiglu_q, gdn_recurrent's norm and
    // gpu::matmul_add_rms_norm_q.
    unsigned* counters(size_t n);
    // Whether a window of `tokens` tokens and `rows` expert rows takes the experts one at a
    // time (each expert's weights read once for its rows) rather than row by row: only
    // where experts repeat. A decode step's rows go to different experts, and a grid over
    // every expert costs more than it saves (on an H200, 10 rows of 512 experts: 86 us a
    // product grouped, 12.4 by id). moe_experts and scratch_bytes both ask it.
    static constexpr int64_t kGroupRows = 8;
    static bool group_by_expert(int64_t tokens, int64_t rows, int64_t n_expert) {
        return tokens > 1 && rows > kGroupRows && 2 * rows >= n_expert;
    }
    // The device's table of each expert's weight rows (and extra's last), made once per
    // expert list.
    const uint8_t* const* expert_table(std::span<const MatView> w, const MatView* extra = nullptr);

    int dev_;
    gpu::Stream stream_ = nullptr;
    gpu::Stream copy_stream_ = nullptr;         // copy_in_async's, made on first use
    std::map<uint64_t, gpu::Event> copies_;     // tickets not yet awaited: their done events
    uint64_t next_ticket_ = 0;
    gpu::IqTables tab_{};
    std::vector<void*> owned_;  // prepared weights and vectors, expert tables
    std::map<std::tuple<const void*, int, int64_t, int64_t>, const void*> copy_of_;
    std::map<std::vector<const uint8_t*>, const uint8_t* const*> tables_;
    std::vector<std::pair<void*, size_t>> scratch_;
    int32_t* bad_id_ = nullptr;     // get_rows' error word (device): the first bad id + 1
    int32_t* bad_id_host_ = nullptr;  // its pinned host copy, queued after each get_rows
    int64_t id_rows_ = -1;          // the table size of the get_rows not yet checked (-1: none)
    // to_device's staging: two halves of pinned host memory used in turn, each with the
    // event of its last copy (so a half is reused only once its copies have left it).
    static constexpr size_t kStageHalf = size_t{1} << 20;
    uint8_t* stage_ = nullptr;
    gpu::Event stage_done_[2] = {nullptr, nullptr};
    int stage_half_ = 0;
    size_t stage_used_ = 0;
    bool stage_dirty_ = false;      // the current half has copies collected, its event not recorded
    bool fresh_ = false;            // a batch was issued since the last stage(): switch halves
    bool making_room_ = false;      // stage() flushes the batch so far to reuse a half
    gpu::Graphs* graphs_ = nullptr;  // null: graphs off, every launch issued at once
    int64_t refused_seen_ = 0;       // refused captures already logged
    std::vector<std::pair<Handoff*, uint64_t>> issuing_;  // shared-device publishes collected, not yet issued
    gpu::Event publish_done_ = nullptr;  // recorded after such a publish (Handoff::shared_device)
    gpu::Profile* profile_ = nullptr;  // STRATA_GPU_PROFILE: kernel times (null: off)
    struct HostTimes {
        int64_t items = 0;
        double item_ms = 0.0;          // from each queue item's begin to its end
        double wait_in_items_ms = 0.0;  // of which waiting for the device (stream syncs, staging's events)
        double wait_ms = 0.0;          // waiting for it outside items
    } host_;
    bool in_item_ = false;
    double item_t0_ = 0.0;
    static constexpr size_t kParamBytes = size_t{64} << 10;
    uint8_t* params_ = nullptr;     // device memory of param()
    size_t param_used_ = 0;
    std::vector<int64_t> pos_host_;        // the positions uploaded last in this batch ...
    const int64_t* pos_dev_ = nullptr;     // ... and where (null: none yet)
    unsigned* counter_ = nullptr;   // the publish kernel's block counter (device)
    unsigned* route_counter_ = nullptr;  // matmul_topk's (device)
    unsigned* failed_ = nullptr;    // the last hand-in wait's outcome (device; 0: ready)
    bool hand_in_ = false;          // a wait was queued since the last publish
};

}  // namespace strata
