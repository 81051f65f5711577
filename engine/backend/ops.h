// The op set: everything a layer of llama, qwen3 and qwen3next (and the MTP block) asks
// of a device. The model describes a window as a sequence of these calls on tensor views
// (engine/model/); a backend executes them on its device: the CPU backend (cpu_ops.cpp)
// runs them on the device's thread pool as they are called; a GPU backend queues them
// as kernels on the device's stream. Every pointer an op takes is memory of the
// backend's device (weights bound to it, activations, the sequence state it holds).
//
// Canonical order. The CPU backend's result for a row is the same bits whatever other
// rows share the call, whatever the thread count and whatever instruction set runs it;
// where an op's floats follow a fixed order, it is named below. tests/test_ops.cpp
// checks every op of every backend present against the plain references of
// tests/ops_reference.h, bit for bit where the op promises it, else within the
// tolerance it states.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "engine/backend/handoff.h"
#include "engine/backend/memory_meter.h"
#include "engine/core/buffer.h"
#include "engine/backend/tensor.h"
#include "engine/quant/mat_view.h"
#include "engine/state/batch.h"

namespace strata {

struct RopeParams {
    int64_t n_rot = 0;  // dims that rotate (the first n_rot of each head)
    bool neox = false;  // pairs (i, i + n_rot/2); else adjacent pairs (2i, 2i+1)
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;  // 1 / linear scaling factor
    // Per-pair divisors of the angle (n_rot / 2 values: a llama 3.1+ file's rope_freqs,
    // memory of the backend's device), applied after freq_scale; null = none.
    const float* freq_factors = nullptr;
    // YaRN (kernels/cpu/ops.h RopeYarn): ext_factor 0 = off; mscale scales cos and sin.
    float ext_factor = 0.0f, corr_low = 0.0f, corr_high = 0.0f, mscale = 1.0f;
};

// Heads of one tensor for norm_rope: n heads of the op's head_dim values, `stride` apart
// within each row, with their per-head RMS norm weights (head_dim values; null = none).
struct RopeHeads {
    Tensor x;
    int64_t n = 0;
    int64_t stride = 0;
    const float* norm = nullptr;
};

struct AttnDims {
    int64_t n_head = 0, n_head_kv = 0;
    int64_t head_dim = 0, head_dim_v = 0;
};

// The largest window a stage runs, as the op sets' own scratch depends on it
// (Ops::scratch_bytes): rows, the widest matmul input, the expert rows (rows x experts
// per token) and their width, the attention heads, the GDN layers' value heads.
struct WindowShape {
    int64_t rows = 1, max_in = 0;
    int64_t expert_rows = 0, expert_ff = 0, n_expert = 0;
    int64_t n_head = 0, head_dim_v = 0;
    int64_t gdn_heads = 0;
};

// A MoE layer's shared expert for Ops::moe_experts: its weights (placed like the routed
// experts') and where its rows go ([T, n_embd], T = the rows of h).
struct SharedExpert {
    MatView gate, up, down;
    Tensor out;
};

// Gated DeltaNet dimensions (MODEL_SPEC 4.4).
struct GdnDims {
    int64_t nk = 0, nv = 0;  // key heads (groups), value heads
    int64_t dk = 0, dv = 0;  // key / value head size
    int64_t conv_k = 0;      // conv kernel K
    float eps = 1e-6f;       // rms_eps: gated norm and (as llama.cpp does) the l2-norm floor
    // Value-head order (docs/qwen35.md 2.3). Grouped (qwen3next): value head h uses key
    // head h / (nv / nk), and the gate logits are per key head [b(r) | a(r)]. Tiled
    // (qwen35, qwen35moe: the converter reorders the value heads): value head h uses key
    // head h % nk, and the gate logits are [b(nv) | a(nv)].
    bool tiled = false;

    int64_t key_head(int64_t h) const { return tiled ? h % nk : h / (nv / nk); }

    int64_t key_dim() const { return nk * dk; }
    int64_t value_dim() const { return nv * dv; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q | k | v channels
    float q_scale() const { return 1.0f / std::sqrt(static_cast<float>(dk)); }  // q's after its L2 norm
};

// Counts of a GPU backend's graphs (kernels/cuda/graph.cu): batches of a window's work
// issued one kernel at a time, captured into a graph, or replayed from one; captures the
// runtime refused.
struct GraphCounts {
    int64_t direct = 0, captured = 0, replayed = 0, refused = 0;
};

class Ops {
public:
    virtual ~Ops() = default;
    virtual std::string_view name() const = 0;

    // --- memory ---
    // Zeroed memory of this device, at least 64-byte aligned: a sequence's state (KV
    // cache, GDN state), a window's buffers, snapshots. The CPU backend's is host memory.
    virtual Buffer alloc(size_t bytes) = 0;
    Allocator allocator() {
        return [this](size_t n) { return alloc(n); };
    }
    // Whether host pointers are this device's memory (the CPU backend, unless a test asks
    // it to stage its copies). Else a window's host inputs (token ids, the MTP's hidden
    // rows) go in through to_device and its outputs (logits, hidden rows) come back
    // through to_host (Model::embed, output and mtp_forward do so: ForwardCtx).
    virtual bool host_memory() const = 0;
    virtual void to_device(void* dst, const void* src, size_t bytes) = 0;  // host -> this device
    virtual void to_host(void* dst, const void* src, size_t bytes) = 0;    // this device -> host

    // Every byte of this device's memory that alloc and the prepare_* calls hand out,
    // with the stage's budget as its limit (engine/backend/memory_meter.h).
    MemoryMeter& meter() { return meter_; }
    const MemoryMeter& meter() const { return meter_; }
    // Device memory the op set keeps for its own intermediate values (grow-only buffers)
    // once it has run windows up to w: the placement planner counts it in the window's
    // bytes. 0 where they live in host memory (the CPU's).
    virtual int64_t scratch_bytes(const WindowShape& w) const {
        (void)w;
        return 0;
    }
    // Host memory this device copies from fastest (a GPU: pinned and mapped; the CPU:
    // its own): the home of streamed weights. Not device memory: not counted.
    virtual Buffer alloc_staging(size_t bytes) = 0;

    // --- weights ---
    // A matmul weight made ready for this device, valid as long as this Ops: the CPU
    // backend adds a packed copy in its kernels' layout where the type has one (the same
    // results, bit for bit); a GPU backend copies the blocks into device memory. Called
    // when a stage binds its layers (Model::bind), never per window.
    virtual MatView prepare_weight(const MatView& w) = 0;
    // A table read by rows (get_rows: the token embedding), made ready for this device:
    // the CPU reads the file's blocks where they are; a GPU copies them over.
    virtual MatView prepare_table(const MatView& t) = 0;
    // A weight vector (norm weights, biases, conv taps) copied into this device's memory,
    // valid as long as this Ops.
    virtual const float* prepare_vector(std::span<const float> v) = 0;

    // The same form of a weight, as bytes whose place the caller chooses (a stage under
    // a budget: engine/model/placement.h): how many (a multiple of 64), written into
    // host memory, and the view of them once they lie at `at` in this device's memory,
    // computing what prepare_weight's view computes, bit for bit.
    virtual size_t weight_bytes(const MatView& w) = 0;
    virtual void write_weight(const MatView& w, void* host) = 0;
    virtual MatView weight_at(const MatView& w, const void* at) = 0;
    // A copy host -> this device on the device's copy queue: it starts once the work
    // queued here before it is done and runs while later work computes (weights
    // streamed in ahead of their layer). await_copy(t): the work queued after it waits
    // for copy t (a GPU: on the device; the CPU: the calling thread). Await each once.
    virtual uint64_t copy_in_async(void* dst, const void* src, size_t bytes) = 0;
    virtual void await_copy(uint64_t ticket) = 0;

    // --- rows ---
    // x[t] = row ids[t] of table, dequantized (ne0 = table.n_in). An id outside the table
    // is a strata::Error naming it, thrown by the op or, on a GPU, at the next wait for
    // the device's stream (the window's to_host at the latest).
    virtual void get_rows(const MatView& table, const int32_t* ids, Tensor x) = 0;
    // y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (w: ne0 values, null = none); y may be x.
    // Canonical: the sum of squares in simd::dot's order, then one scale per element.
    virtual void rms_norm(Tensor x, const float* w, float eps, Tensor y) = 0;
    // Per head of `head` values, in place: x_h = rms_norm(x_h) * w * silu(z_h) (the GDN
    // output norm; w: head values shared by every head).
    virtual void rms_norm_gated(Tensor x, Tensor z, const float* w, int64_t head, float eps) = 0;
    // Per head of `head` values starting at column col0 of every row, in place:
    // x_h = x_h / max(||x_h||, eps) * scale (llama.cpp's l2 norm).
    virtual void l2_norm(Tensor x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale) = 0;
    virtual void add(Tensor y, Tensor x) = 0;  // y += x, elementwise
    // y = silu(g) * u elementwise (e^x from simd::exp); y may be g.
    virtual void swiglu(Tensor g, Tensor u, Tensor y) = 0;
    virtual void copy(Tensor dst, Tensor src) = 0;  // row by row, ne0 values each
    // Every value of dst's rows set to +0.0f: a sequence's recurrent state cleared in place
    // for its next request (Runner::reset_sequence keeps the memory).
    virtual void zero(Tensor dst) = 0;

    // --- matmul: y = x W^T for a weight in any supported block format ---
    // Each output element is one fixed sequence of operations (kernels/cpu/matmul.h): the
    // integer path quantizes each row of x on its own; no result depends on the others.
    virtual void matmul(const MatView& w, Tensor x, Tensor y) = 0;
    // Several weights with the same input (q, k, v; gate, up): one matmul each, x read once.
    virtual void matmul_multi(std::span<const MatOut> outs, Tensor x) = 0;

    // --- attention ---
    // Per row of the batch, for each set in order (a layer's q heads, then its k heads), per
    // head in place: the per-head RMS norm, then the rotary embedding at the row's position
    // (its sequence's pos0 + offset). The angles once per row, shared by every head of
    // the row: the same floats as a rope per head.
    virtual void norm_rope(const Batch& batch, std::span<const RopeHeads> sets, int64_t head_dim, float eps,
                           const RopeParams& rope) = 0;
    // Each row's k and v into its sequence's KV cache, layer il, at the row's position.
    virtual void kv_store(const Batch& batch, int64_t il, Tensor k, Tensor v) = 0;
    // Causal attention of every row's query heads (q: rows of n_head heads at head_stride,
    // gated: each head followed by its gate, out *= sigmoid(gate)) over its sequence's
    // cache up to and including its own position; out: rows of n_head * head_dim_v.
    // Canonical (kernels/cpu/attention.h): scores in position order, softmax, weighted
    // sum of V in position order; a row's result depends only on its query and the cache.
    virtual void attention(const Batch& batch, int64_t il, const AttnDims& d, Tensor q, int64_t head_stride,
                           bool gated, Tensor out) = 0;

    // --- Gated DeltaNet ---
    // From ssm_ba rows [T, per key group: b(r) | a(r)]: beta = sigmoid(b),
    // g = a_h * softplus(a + dt_bias_h) (log-decay, <= 0); both [T, nv].
    virtual void gdn_gates(const GdnDims& d, Tensor ba, const float* a, const float* dt_bias, Tensor beta,
                           Tensor g) = 0;
    // One sequence's rows x [n, conv_dim]: causal depthwise conv over [conv_state ; x]
    // (w: conv_dim x K taps), SiLU, into u [n, conv_dim]; conv_state [K-1, conv_dim]
    // becomes the last K-1 rows. Canonical: each channel's K taps summed in order.
    virtual void conv1d_silu(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) = 0;
    // The conv step of a GDN layer: conv1d_silu, then in u the L2 norms of the q heads
    // (times d.q_scale()) and of the k heads (eps d.eps), the values of those three ops.
    // One op so that a GPU runs it as one kernel.
    virtual void gdn_conv(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) {
        conv1d_silu(d, x, w, conv_state, u);
        l2_norm(u, 0, d.nk, d.dk, d.eps, d.q_scale());
        l2_norm(u, d.key_dim(), d.nk, d.dk, d.eps, 1.0f);
    }
    // The delta rule over one sequence's prepared rows (u: q L2-normed and scaled, k
    // L2-normed, v; g, beta: [n, nv]) and its state [nv, dv, dk]; o: [n, value_dim].
    // Recurrent: token by token (kernels/cpu/gdn_step.h), so any split of a sequence
    // into windows gives the same bits. Chunked: the WY form in chunks of `chunk`
    // tokens, equal to the recurrence to f32 rounding.
    virtual void gdn_recurrent(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o) = 0;
    virtual void gdn_chunked(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o,
                             int64_t chunk) = 0;
    // gdn_recurrent from a state held in another buffer of the same shape (state_in, a
    // snapshot's: GdnState::read_from), the state after the rows going to `state`;
    // state_in is not written. The default copies it over, then runs in place.
    virtual void gdn_recurrent_from(const GdnDims& d, Tensor u, Tensor g, Tensor beta, const float* state_in,
                                    float* state, Tensor o) {
        copy(Tensor::f32(state, d.dk, d.nv * d.dv), Tensor::f32(state_in, d.dk, d.nv * d.dv));
        gdn_recurrent(d, u, g, beta, state, o);
    }
    // Whether gdn_recurrent_from costs what gdn_recurrent does (each row of the state read
    // from state_in as the recurrence takes it up, the pass's own read), so that a verify
    // window's snapshot lends its buffer instead of taking a copy, and a restore lends it
    // back (StateSnapshot::save / load). Not on a GPU, whose captured graphs keep their
    // buffers.
    virtual bool state_reads_elsewhere() const { return false; }

    // --- mixture of experts ---
    // Per row of router logits [T, n_expert] (softmaxed in place): the k largest
    // probabilities (ties: the lower index), ids [T, k], and their weights renormalized to
    // sum 1 (the sum clamped below at 2^-14, as llama.cpp does) into wt [T, k].
    virtual void topk_softmax(Tensor logits, int64_t k, int32_t* ids, float* wt) = 0;
    // routed[t * k + s] = down_e(silu(gate_e(h_t)) * up_e(h_t)) for e = ids[t * k + s]:
    // every expert's rows in one matmul each (rows of one expert in (t, s) order). An
    // expert whose gate view has null data is computed elsewhere (its rows of routed
    // keep what they hold): experts split between a device and the host (--cpu-moe with
    // a cache of hot experts on the device).
    // shared (optional): a shared expert (qwen3next, qwen35moe) that every row of h takes,
    // computed with the routed experts where the backend can (the CPU: in their parallel
    // runs; a GPU: as one more row per token in their launches): out = its down(silu(gate
    // h) * up h), the bits that matmul_multi of gate and up, swiglu and matmul of down give.
    // Returns whether it did; where it did not, the caller runs those ops itself.
    virtual bool moe_experts(std::span<const MatView> gate, std::span<const MatView> up,
                             std::span<const MatView> down, const int32_t* ids, int64_t k, Tensor h,
                             Tensor routed, const SharedExpert* shared) = 0;
    // out[t] = sum_s wt[t, s] routed[t * k + s] (s in order) + sigmoid(shared_gate . h_t) shared[t];
    // no shared term when shared.data is null (a MoE without a shared expert: qwen3moe).
    virtual void moe_combine(Tensor routed, const float* wt, int64_t k, Tensor shared, const float* shared_gate,
                             Tensor h, Tensor out) = 0;

    // --- the hand-off between stages (engine/backend/handoff.h) ---
    // The writing stage's last op: x's rows into the payload, then the ready word raised
    // to `window` with release order (a GPU: volatile stores, a system-scope fence, the
    // last block raises the word); no copy when x is the payload already. drop: the word
    // stays down (STRATA_TEST_HANDOFF_DROP).
    virtual void handoff_publish(Tensor x, Handoff& h, uint64_t window, bool drop) = 0;
    // The reading stage's first op: waits until the ready word is `window` (timeout_ms,
    // 0 = no limit) and returns the window's rows (x's shape) for the stage to run on:
    // the payload itself where the device computes on host-mapped memory as on its own
    // (the CPU: a boundary then costs one copy, the writer's), else x, the payload copied
    // into it (a GPU). On expiry or abort the error word says which (Handoff::failure()).
    // The CPU waits on the host: nullopt then, x not touched, and the stage skips its
    // layers. A GPU waits on the device (the host queues the whole stage at once): it
    // returns x, a failed wait leaves x as it was, the stage's kernels run on it and its
    // publish raises the abort value; hand_in_failed tells the host afterwards.
    virtual std::optional<Tensor> handoff_wait(Handoff& h, uint64_t window, int64_t timeout_ms, Tensor x) = 0;
    // After a step whose handoff_wait returned rows: whether that wait failed (a GPU
    // waits for the step's queued work first). The step's results are then not to be
    // used, and its sequences' state is unknown (the window fails; Scheduler resets them).
    virtual bool hand_in_failed(const Handoff& h) { return h.error() != Handoff::kNoError; }

    // A GPU backend's graph counts (zero for backends without graphs).
    virtual GraphCounts graph_counts() const { return {}; }
    // STRATA_GPU_PROFILE: where a GPU backend's time went (host items, waits, each
    // kernel's time), empty elsewhere. Read while the device is idle.
    virtual std::string profile() const { return {}; }

protected:
    MemoryMeter meter_;
};

}  // namespace strata
