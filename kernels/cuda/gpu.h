// The GPU kernels and runtime calls as plain C++ (no runtime header): what the GPU
// backend of engine/backend (gpu_ops.cpp, gpu_device.cpp) calls. Built from the sources
// of kernels/cuda/ with nvcc (CUDA), hipcc (HIP) or the host compiler against a CPU HIP
// runtime (STRATA_HIP_CPU). Every pointer is device memory unless named host; every
// launch is queued on `s` and returns at once; errors throw strata::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "engine/quant/types.h"

namespace strata::gpu {

using Stream = void*;  // the runtime's stream handle

// --- runtime ---
const char* backend_name();                // "cuda" or "hip"
int device_count(std::string* why);        // 0 when there is no driver or device (why says which)
std::string device_name(int dev);
void device_memory(int dev, int64_t* free_bytes, int64_t* total_bytes);
void set_device(int dev);                  // the calling thread's current device
int warp_size();                           // lanes per warp of the current device (32 or 64)
Stream stream_create();
void stream_destroy(Stream s);
void stream_sync(Stream s);                // waits for everything queued; throws a kernel's error
void* dev_alloc(size_t bytes);             // throws when the device is out of memory
void dev_free(void* p);                   // waits for the whole device first (the runtime's free does)
// Stream-ordered: the memory is for work queued on s after the call, and is freed once
// the work queued on s before the free has run; neither call waits for other streams.
// dev_free would: two stages on one device would then deadlock when one frees while the
// other's hand-off wait spins for work the freeing thread has yet to queue.
void* dev_alloc_async(size_t bytes, Stream s);
void dev_free_async(void* p, Stream s);
void* host_alloc_mapped(size_t bytes);     // pinned, mapped into every device (same address)
void host_free(void* p);
// Events order one stream's work after another's (weights copied in on a copy stream
// while the compute stream runs).
using Event = void*;
Event event_create();
void event_destroy(Event e);
void event_record(Event e, Stream s);      // e completes when s reaches this point
void stream_wait(Stream s, Event e);       // what s runs after this waits for e
void event_sync(Event e);                  // the host waits for e (record it first: HIP-CPU refuses a never-recorded one)
void memset_async(void* p, int v, size_t bytes, Stream s);
void copy_async(void* dst, const void* src, size_t bytes, Stream s);  // any direction
void check_launch(const char* what);       // the last launch's error, if any
// The current device's read bandwidth in GB/s: the best of reps reads of a `bytes` buffer.
double read_bandwidth_gbs(size_t bytes, int reps);
// GB/s of copies of `bytes` from pinned host memory into the current device (the best of reps).
double copy_bandwidth_gbs(size_t bytes, int reps);

// --- graphs (graph.cu) ---
// While a stream's Graphs object is attached on a thread, that thread's launches, copies
// and memsets on the stream are collected, not issued; graphs_flush issues them: as the
// replay of a graph captured for the very same work (every kernel, grid and argument
// byte, every copy's addresses), by capturing them (the second time the same work comes),
// or one by one. Any other call on the stream (sync, event, wait) flushes first, and so
// does dev_free. on_flush runs after each flush that issued something. Copies that touch
// pageable host memory must not be collected (graphs_flush, then copy).
class Graphs;
struct GraphStats {
    int64_t direct = 0, captured = 0, replayed = 0;  // flushes of each kind
    int64_t refused = 0;                             // captures the runtime refused
};
Graphs* graphs_create(Stream s, std::function<void()> on_flush);
void graphs_destroy(Graphs* g);
void graphs_attach(Graphs* g);  // null: this thread issues at once
bool graphs_recording(const Graphs* g);  // attached on this thread
void graphs_flush(Graphs* g);
GraphStats graphs_stats(const Graphs* g);

// --- kernel times (profile.cu; STRATA_GPU_PROFILE) ---
// While a stream's Profile is attached on a thread (and no Graphs is), each kernel that
// thread launches on the stream is timed with events; profile_collect, after a sync of
// the stream, adds the times up per kernel; the report lists the `top` slowest kernels.
class Profile;
Profile* profile_create(Stream s);
void profile_destroy(Profile* p);
void profile_attach(Profile* p);  // null: this thread's kernels are not timed
void profile_collect(Profile* p);
std::string profile_report(const Profile* p, int top);

// The IQ codebooks on the current device (made once per device).
struct IqTables {
    const uint64_t* iq2xxs;
    const uint64_t* iq2xs;
    const uint64_t* iq2s;
    const uint32_t* iq3xxs;
    const uint32_t* iq3s;
    const uint64_t* iq1s;
    const uint8_t* ksigns;
};
IqTables upload_iq_tables();

// A matrix of f32 rows: rows x cols, row r at p + r * ld.
struct Rows {
    float* p;
    int64_t cols, rows, ld;
};

// A weight: n_out rows of n_in values of `type`, row r at data + r * stride bytes.
// Kernel arguments have no padding (explicit fields instead): a launch's bytes are its
// key in a graph (recorder.h), and padding bytes are whatever the copy left there.
struct Weight {
    GgmlType type;
    uint32_t unused = 0;
    const uint8_t* data;
    int64_t n_in, n_out;
    size_t stride;
};
static_assert(sizeof(Weight) == 40, "no padding in kernel arguments");
bool supports(GgmlType type);  // matmul and get_rows

// --- rows and elementwise (elementwise.cu) ---
void rms_norm(Rows x, const float* w, float eps, Rows y, Stream s);
void rms_norm_gated(Rows x, Rows z, const float* w, int64_t head, float eps, Stream s);
void l2_norm(Rows x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale, Stream s);
void add(Rows y, Rows x, Stream s);
void swiglu(Rows g, Rows u, Rows y, Stream s);
void copy(Rows dst, Rows src, Stream s);
// tiled: the value-head order of qwen35 (engine/backend/ops.h GdnDims::tiled).
void gdn_gates(Rows ba, int64_t nk, int64_t nv, bool tiled, const float* a, const float* dt_bias, Rows beta, Rows g,
               Stream s);
void conv1d_silu(Rows x, const float* w, int64_t K, float* conv_state, Rows u, Stream s);
// conv1d_silu, then l2_norm of u's first n_heads heads of `head` values (times q_scale)
// and of the next n_heads (times 1), in one kernel with the same floats. False (nothing
// launched) where head is wider than the kernel's block.
bool gdn_conv(Rows x, const float* w, int64_t K, float* conv_state, Rows u, int64_t n_heads, int64_t head, float eps,
              float q_scale, Stream s);
// Per row of logits: softmax in place, the k largest (ids[t k ..]) and their
// probabilities over their sum (wt[t k ..]), as llama.cpp's MoE routing does.
inline constexpr int kTopkMaxExperts = 1024;
void topk_softmax(Rows logits, int64_t k, int32_t* ids, float* wt, Stream s);
// A MoE layer's output row t: the sum over s < k of wt[t k + s] times routed row t k + s,
// plus sigmoid(shared_gate . h row t) times shared row t where shared.p is set (a null
// shared_gate: times 1).
struct MoeCombine {
    Rows routed;
    const float* wt;
    int64_t k;
    Rows shared;
    const float* shared_gate;
    Rows h;
};
static_assert(sizeof(MoeCombine) == 3 * sizeof(Rows) + 24, "no padding in kernel arguments");
void moe_combine(const MoeCombine& c, Rows out, Stream s);

// --- weights (matmul.cu) ---
// x[t] = row ids[t] of the table; an id outside it sets *bad (device memory, 0 = none)
// to id + 1 (the first seen) and leaves that row.
void get_rows(const Weight& table, const int32_t* ids, Rows x, int32_t* bad, const IqTables& tab, Stream s);
void matmul(const Weight& w, Rows x, Rows y, const IqTables& tab, Stream s);
// matmul of float weights (a MoE router) and then topk_softmax of y, in one launch: the
// last block to finish routes every row (the two ops' bits). counter: a device unsigned, 0
// between calls (each call leaves it so).
void matmul_topk(const Weight& w, Rows x, Rows y, int64_t k, int32_t* ids, float* wt, unsigned* counter, Stream s);
bool float_weight(GgmlType type);  // matmul_topk takes it (f32, f16, bf16)
// y[i] = W_{ids[i]} x[i / div] for i < n: experts' weights by id (w: device array of
// each expert's rows, all of one type and shape).
void matmul_ids(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                const int32_t* ids, int64_t div, Rows x, Rows y, const IqTables& tab, Stream s);

// --- integer dot products (matmul_q.cu) ---
// Rows of x as integers: value i of row t is d[t * n / 32 + i / 32] * (128 q + r) at
// index t * n + i (kernels/cpu/act_quant.h's two digits); s holds the digits' sums.
struct ActQ {
    int8_t* q;
    int8_t* r;
    float* d;
    int32_t* s;  // per 16 values: 128 * (sum of q) + (sum of r), the minimum terms' sums
    int64_t n, rows;
    // Rows r0 .. r0 + count - 1 of these digits.
    ActQ rows_at(int64_t r0, int64_t count) const {
        return {q + r0 * n, r + r0 * n, d + r0 * (n / 32), s + r0 * (n / 16), n, count};
    }
};
bool int_dot(GgmlType type);  // matmul_q and matmul_ids_q take it (every quantized type)
size_t act_q_bytes(int64_t n, int64_t rows);  // the scratch quantize_act needs
ActQ act_q_layout(void* scratch, int64_t n, int64_t rows);  // where quantize_act puts its parts
ActQ quantize_act(Rows x, void* scratch, Stream s);  // x.cols a multiple of 32
// rms_norm, rms_norm_gated and swiglu that also quantize what they write (fused.cu), as
// quantize_act of it would, byte for byte, in one kernel (scratch: act_q_bytes; row
// widths and heads multiples of 32).
ActQ rms_norm_q(Rows x, const float* w, float eps, Rows y, void* scratch, Stream s);
// add(x, a) and then rms_norm_q of x: a layer's residual add and the next norm.
ActQ add_rms_norm_q(Rows x, Rows a, const float* w, float eps, Rows y, void* scratch, Stream s);
// moe_combine into out, add(x, out) and rms_norm_q of x in one kernel: a MoE layer's
// output, the residual add after it and the next layer's norm, the three ops' bytes (y may
// be c.h: each row's gate is summed before the row is written).
ActQ moe_combine_add_rms_norm_q(const MoeCombine& c, Rows out, Rows x, const float* w, float eps, Rows y,
                                void* scratch, Stream s);
ActQ rms_norm_gated_q(Rows x, Rows z, const float* w, int64_t head, float eps, void* scratch, Stream s);
ActQ swiglu_q(Rows g, Rows u, Rows y, void* scratch, Stream s);
// matmul and matmul_ids with x quantized: the same results for a row whatever rows share
// the call.
void matmul_q(const Weight& w, const ActQ& x, Rows y, const IqTables& tab, Stream s);
// matmul_q (y = w x), then add_rms_norm_q(h, y, nw, eps, out) in the same launch: the
// last of the blocks to finish adds each row of y into h and writes its norm into out
// with the digits (scratch: act_q_bytes(w.n_out, x.rows)), the bytes of the three ops (a
// decode step's or a verify window's out projection, the residual add and the next norm).
// x.rows <= kNormProductRows, w.n_out a multiple of 32; counters: x.rows device unsigneds,
// 0 between calls (each call leaves them so). Returns the norm's digits.
inline constexpr int64_t kNormProductRows = 8;
ActQ matmul_add_rms_norm_q(const Weight& w, const ActQ& x, Rows y, Rows h, const float* nw, float eps, Rows out,
                           void* scratch, unsigned* counters, const IqTables& tab, Stream s);
// matmul_q of up to kMultiMax weights against the same x in one launch (a layer's q, k and
// v, or gate and up), y[i] = w[i] x as matmul_q gives it. A decode step's launches cost a
// few microseconds each on a card, more than a small product's work. The weights share a
// type and a width (multi_fits says whether a weight may join the first).
inline constexpr int kMultiMax = 4;
bool multi_fits(const Weight& first, const Weight& w);
void matmul_q_multi(std::span<const Weight> w, std::span<const Rows> y, const ActQ& x, const IqTables& tab, Stream s);
// w2, y2 (optional): a second table of experts of w's type and shape and its output (y's
// rows, y.ld apart), computed in the same launch (the experts' gate and up).
// Rows past the routed ones (extra.n_ids <= i < y.rows): a shared expert that every token
// takes, entry `id` of the tables, as more rows of the same launch; row n_ids + j reads x's
// row x0 + j and goes to row j of extra.y (extra.y2 for w2), y.ld apart.
struct IdsExtra {
    int64_t n_ids = -1;  // < 0: every row is routed by ids
    int64_t id = 0;
    int64_t x0 = 0;
    float* y = nullptr;
    float* y2 = nullptr;
};
void matmul_ids_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                  const int32_t* ids, int64_t div, const ActQ& x, Rows y, const IqTables& tab, Stream s,
                  const uint8_t* const* w2 = nullptr, float* y2 = nullptr, const IdsExtra& extra = {});
// matmul_ids_q of gate (w, into y) and up (w2, into y2), then the SwiGLU of the two into
// y, quantized as swiglu_q would (scratch: act_q_bytes(n_out, y.rows)), in the same
// launch: the last block to finish each 32 outputs of a row computes them (n_out a
// multiple of 32). counters: y.rows * n_out / 32 device unsigneds, 0 between calls (each
// call leaves them so). Returns the SwiGLU's digits.
ActQ matmul_ids_swiglu_q(GgmlType type, const uint8_t* const* w, const uint8_t* const* w2, int64_t n_in,
                         int64_t n_out, size_t stride, const int32_t* ids, int64_t div, const ActQ& x, Rows y, float* y2,
                         const IdsExtra& extra, void* scratch, unsigned* counters, const IqTables& tab, Stream s);
// matmul_ids_q of a MoE layer's down product (one table, div 1; extra: the shared
// expert's rows, or none), then moe_combine_add_rms_norm_q(c, out, h, nw, eps, norm_out)
// in the same launch: the last of a token's blocks (its k routed rows' and its shared
// row's) combines them, adds into h and writes the norm of h with its digits (scratch:
// act_q_bytes(n_out, h.rows)), the bytes of the three ops. c.routed is y (and c.shared
// extra.y); n_out a multiple of 32; counters: h.rows device unsigneds, 0 between calls
// (each call leaves them so). Returns the norm's digits.
ActQ matmul_ids_combine_add_rms_norm_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out,
                                       size_t stride, const int32_t* ids, const ActQ& x, Rows y,
                                       const IdsExtra& extra, const MoeCombine& c, Rows out, Rows h, const float* nw,
                                       float eps, Rows norm_out, void* scratch, unsigned* counters,
                                       const IqTables& tab, Stream s);
// The rows of ids (n of them) by expert, for matmul_grouped_q: made on the device in
// scratch (expert_groups_ints(n_expert, n) ints of device memory).
struct ExpertGroups {
    int32_t* offsets;  // n_expert + 1: expert e's rows are order[offsets[e] .. offsets[e + 1])
    int32_t* order;    // n row indices
    int64_t n_expert;
};
size_t expert_groups_ints(int64_t n_expert, int64_t n);
ExpertGroups group_ids(const int32_t* ids, int64_t n, int64_t n_expert, int32_t* scratch, Stream s);
// matmul_ids_q taken expert by expert (each expert's weights read once for all its rows),
// with the same results for every row.
void matmul_grouped_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                      const ExpertGroups& g, int64_t div, const ActQ& x, Rows y, const IqTables& tab, Stream s,
                      const uint8_t* const* w2 = nullptr, float* y2 = nullptr);

// --- attention (attention.cu) ---
// The rows of up to kMaxSeqs sequences of a window, with their KV cache heads. The
// sequences' first positions are device memory (pos0[i] for s[i]), so that the
// arguments of a decode step are the same at every position (a graph's replay).
inline constexpr int kMaxSeqs = 8;
struct SeqRows {
    int64_t row0, n;
    uint8_t* k;  // layer's K head 0 at position 0; head h at k + h * k_head, position p at + p * k_pos
    uint8_t* v;
    int64_t k_head, v_head, k_pos, v_pos;  // bytes
};
struct SeqTable {
    int64_t n = 0;
    const int64_t* pos0 = nullptr;  // device: n positions
    SeqRows s[kMaxSeqs] = {};
};
struct RopeSet {
    float* x;
    int64_t ld, n, stride;  // row stride (floats), heads, head stride (floats)
    const float* norm;
};
inline constexpr int kMaxRopeSets = 4;
struct RopeArgs {  // no padding (see Weight)
    int64_t n_sets;
    RopeSet set[kMaxRopeSets];
    int64_t head_dim, n_rot;
    int32_t neox;
    float eps, freq_base, freq_scale;
    const float* freq_factors;  // n_rot / 2 divisors, or null
    float ext_factor, corr_low, corr_high, mscale;  // YaRN (engine/backend/ops.h RopeParams)
};
static_assert(sizeof(RopeArgs) == 224, "no padding in kernel arguments");
static_assert(sizeof(SeqTable) == 16 + kMaxSeqs * sizeof(SeqRows) && sizeof(SeqRows) == 64,
              "no padding in kernel arguments");
void norm_rope(const SeqTable& seqs, const RopeArgs& a, Stream s);
void kv_store(const SeqTable& seqs, GgmlType type, int64_t n_head_kv, int64_t hd, int64_t hdv, Rows k, Rows v,
              Stream s);
// norm_rope, then kv_store of set k_set's heads (K, as the rotation left them, head_dim
// values each) and of v, in one launch (the same bytes): an attention layer's two ops
// before attention. seqs: kv_store's table (with the caches).
struct KvStore {  // no padding (see Weight)
    Rows v;
    int64_t n_head_kv, hdv;
    int32_t k_set;
    GgmlType type;
};
static_assert(sizeof(KvStore) == sizeof(Rows) + 24, "no padding in kernel arguments");
void norm_rope_kv_store(const SeqTable& seqs, const RopeArgs& a, const KvStore& kv, Stream s);
// scratch: attention_scratch_floats(rows, n_head, hdv) floats of device memory (the
// positions' parts of a flash-decoding split).
inline constexpr int kAttnMaxSplit = 32;
size_t attention_scratch_floats(int64_t rows, int64_t n_head, int64_t hdv);
// max_pos: the largest pos0 + n of the table (the host's copy of the positions).
// digits (optional, q non-null): out's rows also quantized there as quantize_act would
// (act_q_layout for out's shape; hdv a multiple of 32), in the kernel that writes them.
void attention(const SeqTable& seqs, int64_t max_pos, GgmlType type, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t hdv,
               Rows q, int64_t head_stride, bool gated, Rows out, float* scratch, Stream s, const ActQ& digits = {});

// --- Gated DeltaNet (gdn.cu) ---
// tiled: value head h uses key head h % nk (qwen35), else h / (nv / nk).
// gates (optional, ba.p set): g and beta computed in the recurrence's kernel from ba as
// gdn_gates computes them (and written to g and beta as it writes them), one launch fewer.
struct GdnGateArgs {
    Rows ba{};
    const float* a = nullptr;
    const float* dt_bias = nullptr;
};
// norm (optional, w set): then rms_norm_gated_q of o by heads of dv with z and w, in the
// same launch (the last of each head's blocks to finish runs it; dv a multiple of 32;
// scratch: act_q_bytes(o.cols, o.rows)); counters: nv device unsigneds, 0 between calls
// (each call leaves them so). Returns the norm's digits (none without a norm).
struct GdnNormArgs {
    Rows z{};
    const float* w = nullptr;
    float eps = 0.0f;
    uint32_t unused = 0;
    ActQ a{};  // set by gdn_recurrent
    unsigned* counters = nullptr;
};
ActQ gdn_recurrent(int64_t nk, int64_t nv, int64_t dk, int64_t dv, bool tiled, Rows u, Rows g, Rows beta, float* state,
                   Rows o, Stream s, const GdnGateArgs& gates = {}, const GdnNormArgs& norm = {},
                   void* scratch = nullptr);

// --- hand-off (handoff.cu; engine/backend/handoff.h holds the words) ---
inline constexpr uint64_t kHandoffAbort = ~uint64_t{0};
// x's rows into payload (host-mapped), then the last block raises *ready (host-mapped)
// after a system-scope fence: to *window (device memory, so that the launch is the same
// in every window), unless drop; to kHandoffAbort when *failed (a
// device word of handoff_wait, or null) says this stage's own hand-in failed. counter: a
// device int, 0 between calls.
void handoff_publish(Rows x, float* payload, uint64_t* ready, const uint64_t* window, bool drop, unsigned* counter,
                     const unsigned* failed, Stream s);
// The reading stage's first kernels: wait on the device until *ready is *window (or the
// abort value, or timeout_ms of the device's clock pass; 0 = no limit), then x = the
// payload's rows. A failed wait sets *err (host-mapped) to 1 (timed out) or 2 (aborted)
// and *failed (device) nonzero, and leaves x as it is.
void handoff_wait(const uint64_t* ready, uint32_t* err, const uint64_t* window, int64_t timeout_ms, const float* payload,
                  Rows x, unsigned* failed, Stream s);

// For bench/gpu_handoff (handoff_latency.cu): `rounds` rounds of one host-mapped word
// passed between two sides (side 0 raises 1, 3, 5... and waits for 2, 4, 6...; side 1 the
// reverse), raised and awaited as the hand-off kernels do. A wait past timeout_ms (the
// device's clock) sets *err (host-mapped) to 1 and the word to kHandoffAbort, which stops
// the other side.
void flag_pingpong(uint64_t* word, int side, int rounds, int64_t timeout_ms, uint32_t* err, Stream s);

}  // namespace strata::gpu
