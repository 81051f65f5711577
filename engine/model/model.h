// A loaded model: hyperparameters, weights bound to the mapped GGUF, and the forward
// pass split into embed / layers / head so that stages can run layer ranges. Each
// architecture is a subclass that binds its tensors and describes one layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/gguf/reader.h"
#include "engine/state/batch.h"
#include "engine/model/hparams.h"
#include "engine/model/weights.h"
#include "engine/state/seq_state.h"

namespace strata {

// The buffers of a forward pass: a stack of memory that each piece of the window takes
// from in the order it runs, inside a Frame that gives it back when the piece ends, so
// buffers are planned by the code's own nesting (no numbered slots) and a window of the
// same shape gets the same addresses every time (what a GPU graph replay wants). The
// memory grows to the deepest window seen and is never moved while in use. It is memory
// of the device the window runs on (alloc: its Ops::alloc).
class Scratch {
public:
    explicit Scratch(Allocator alloc) : alloc_(std::move(alloc)) {}

    class Frame {
    public:
        explicit Frame(Scratch& s) : s_(s), mark_(s.top_) {}
        ~Frame() { s_.top_ = mark_; }
        Frame(const Frame&) = delete;
        Frame& operator=(const Frame&) = delete;

    private:
        Scratch& s_;
        std::pair<size_t, size_t> mark_;
    };

    float* floats(size_t n) { return static_cast<float*>(alloc(n * sizeof(float))); }
    int32_t* ints(size_t n) { return static_cast<int32_t*>(alloc(n * sizeof(int32_t))); }
    Tensor rows(int64_t n, int64_t rows) { return Tensor::f32(floats(static_cast<size_t>(n * rows)), n, rows); }
    size_t capacity() const;  // bytes held

private:
    void* alloc(size_t bytes);
    Allocator alloc_;
    std::vector<Buffer> chunks_;
    std::pair<size_t, size_t> top_{0, 0};  // chunk, offset of the next allocation
};

// An architecture's weights of one layer (or of its MTP block), placed for a device.
struct LayerWeights {
    virtual ~LayerWeights() = default;
};

class LayerStream;  // engine/model/streaming.h
class HostExperts;  // engine/model/host_experts.h

// Where a stage's weights go under a device budget (engine/model/placement.h decides):
// the first n_resident layers of the stage, the embedding table and the head (with the
// MTP block) in device memory for good, the other layers in host memory, copied into
// one of n_slots slots of slot_bytes before they run (n_slots = 1 + prefetch depth).
struct StagePlacement {
    bool budgeted = true;  // false: no budget, only the host experts below
    int64_t n_resident = 0;
    int n_slots = 0;
    size_t slot_bytes = 0;
    // --cpu-moe / --n-cpu-moe: the expert stacks of the first n_cpu_moe MoE layers of the
    // model (-1: all) stay in host memory and run on host_ops (engine/model/host_experts.h),
    // with a device cache of moe_cache_bytes for the hot ones, re-ranked every adapt_every windows.
    Ops* host_ops = nullptr;
    int64_t n_cpu_moe = 0;
    size_t moe_cache_bytes = 0;
    int adapt_every = 0;
};

// The weights one stage holds, placed for its device: its layers [l0, l1), the
// embedding table on the first stage, the head and the MTP block on the last.
struct StageWeights {
    StageWeights();
    ~StageWeights();
    int64_t l0 = 0, l1 = 0;
    bool embed = false, head = false;
    MatView tok_embd;  // embed: read by row
    MatView output;    // head: the LM head
    WeightVec output_norm;  // head
    WeightVec rope_freqs;   // the file's rope_freqs (empty: none), for every attention layer
    std::unique_ptr<LayerWeights> mtp;  // head: the architecture's MTP block (null: none)
    std::vector<std::unique_ptr<LayerWeights>> resident;  // per layer of the stage; null where streamed
    std::vector<Buffer> memory;           // blocks of device memory placed under a budget
    std::unique_ptr<LayerStream> stream;  // the streamed layers (null: none)
    std::unique_ptr<HostExperts> host_experts;  // experts in host memory (null: none)

    // Layer il's weights as the layer runs now: resident, or where the stream put them
    // (LayerStream::enter, which Model::run_layers calls first).
    const LayerWeights& layer(int64_t il) const;
};

class Model;

// What a forward pass runs on: the device's op set (engine/backend/ops.h), the weights
// its stage bound for that device, and the window's buffers.
struct ForwardCtx {
    ForwardCtx(Ops& o, const StageWeights* w) : ops(o), weights(w), scratch(o.allocator()) {}
    // All of m's weights bound for o, owned here (one device runs the whole model).
    ForwardCtx(Ops& o, const Model& m);
    ForwardCtx(const ForwardCtx&) = delete;
    ForwardCtx& operator=(const ForwardCtx&) = delete;

    Ops& ops;

    // A window's edges, where host memory meets the device's (Ops::host_memory): inputs
    // (token ids, hidden rows) as device memory, outputs (logits, hidden rows) written to
    // device memory and then copied out. On a device whose memory is host memory these
    // are the host pointers themselves. Buffers come from the scratch: call inside a Frame.
    // Token ids are checked against [0, rows) here, on the host, before anything runs
    // on them (a GPU's own check in get_rows reaches the host only at its next wait).
    const int32_t* in_ids(const int32_t* host, int64_t n, int64_t rows);
    const float* in_rows(const float* host, size_t floats);
    float* out_rows(float* host, size_t floats);               // where to write
    void out_done(float* host, const float* dev, size_t floats);  // then this

private:
    std::unique_ptr<StageWeights> owned_;  // before `weights`: the constructor above sets both

public:
    const StageWeights* weights;
    Scratch scratch;
};

class Model {
public:
    virtual ~Model() = default;
    // Maps the file, reads its hyperparameters and binds every tensor; a missing tensor,
    // a wrong shape or an unsupported type is a strata::Error naming it.
    // mtp_path (empty: none): an MTP-only sidecar (docs/qwen35.md 2.10, what llama.cpp's
    // converter writes with --mtp) holding the MTP block of a main file written without
    // one; its hyperparameters must be the main file's.
    static std::unique_ptr<Model> load(const std::string& path, const std::string& mtp_path = "");
    static std::unique_ptr<Model> load(GgufFile file, std::unique_ptr<GgufFile> mtp_file = nullptr);

    const HParams& hp() const { return hp_; }
    const GgufFile& file() const { return file_; }
    // Where the MTP block's tensors are: the sidecar when one was given, else the file.
    const GgufFile& mtp_file() const { return mtp_file_ ? *mtp_file_ : file_; }

    // The weights a stage on `ops`'s device runs with: layers [l0, l1) (l1 = -1: to the
    // last), the embedding table when embed, the LM head and the MTP block when head.
    // Matrices go through ops.prepare_weight (the CPU backend packs them; a GPU backend
    // copies them over), so only the layers a stage holds are prepared, on its device.
    // placement (null: none, each weight prepared where the backend keeps it): the stage
    // under a device budget, every byte in blocks of Ops::alloc memory, the layers past
    // the resident ones streamed.
    std::unique_ptr<StageWeights> bind(Ops& ops, int64_t l0 = 0, int64_t l1 = -1, bool embed = true,
                                       bool head = true, const StagePlacement* placement = nullptr) const;
    // Bytes of device memory layer il takes on ops's device once placed (one block), and
    // those of the embedding table / head / MTP block a stage would place.
    // experts_on_host: without the expert stacks (they stay in host memory).
    size_t layer_bytes(Ops& ops, int64_t il, bool experts_on_host = false) const;
    // Whether layer il's experts stay in host memory under --n-cpu-moe n (-1: all).
    bool experts_on_host(int64_t il, int64_t n_cpu_moe) const {
        return n_cpu_moe != 0 && hp_.moe() && il < hp_.n_layer && (n_cpu_moe < 0 || il < n_cpu_moe);
    }
    size_t fixed_bytes(Ops& ops, bool embed, bool head) const;
    // Bytes of device memory the buffers of a window of `rows` tokens take (ForwardCtx's
    // scratch) on a stage holding [l0, l1) (the embedding when embed, the head, the
    // hidden rows and a catch-up MTP window over the same rows when head): measured by
    // running the window's code over an op set that computes nothing (MeasureOps).
    size_t window_bytes(int64_t l0, int64_t l1, bool embed, bool head, int64_t rows) const;
    // The shape of a window of `rows` for an op set's scratch (Ops::scratch_bytes).
    WindowShape window_shape(int64_t rows) const;

    // Fresh per-sequence state (KV cache for attention layers, recurrent state) for the
    // layers [l0, l1) (l1 = -1: to the last), plus the MTP blocks when with_mtp, in the
    // memory of the device whose op set is ops (the one that runs those layers).
    SeqState new_state(Ops& ops, int64_t n_ctx, GgmlType cache_type, int64_t l0 = 0, int64_t l1 = -1,
                       bool with_mtp = true) const;

    // tokens at positions state.n_past .. n_past + T - 1; writes logits [T, n_vocab]
    // when all_logits, else [n_vocab] for the last token. Advances state.n_past.
    void eval(ForwardCtx& ctx, SeqState& state, std::span<const int32_t> tokens, float* logits,
              bool all_logits) const;

    void embed(ForwardCtx& ctx, const int32_t* tokens, int64_t T, float* x) const;  // x: [T, n_embd]
    // Layers [l0, l1) over the window's rows x [batch.n_rows, n_embd] in place.
    void run_layers(ForwardCtx& ctx, const Batch& batch, int64_t l0, int64_t l1, float* x) const;
    // Several sequences in one window: item i's tokens at positions state.n_past..;
    // logits_rows receives [sum of (all_logits ? n_i : 1), n_vocab] in item order (null:
    // no LM head at all); hidden_out, when set, the post-output-norm rows of all the
    // item's tokens [n_i, n_embd] (what the MTP drafter consumes).
    struct BatchItem {
        SeqState* state;
        std::span<const int32_t> tokens;
        bool all_logits;
        float* hidden_out = nullptr;
    };
    void eval_batch(ForwardCtx& ctx, std::span<const BatchItem> items, float* logits_rows) const;

    // The end of a window, on the device holding the head. x: [batch.n_rows, n_embd] after
    // the last layer. For sequence i of the batch: the post-norm rows of all its tokens
    // into want[i].hidden_out (when set), and the logits of its wanted rows (all, or the
    // last) into logits_rows, in order; null logits_rows: no LM head work. Only the rows
    // whose logits are wanted go through the LM head (the vocabulary matmul dominates).
    struct OutputWant {
        bool all_logits;
        float* hidden_out;
    };
    void output(ForwardCtx& ctx, const Batch& batch, const float* x, std::span<const OutputWant> want,
                float* logits_rows) const;

    // Multi-token prediction (qwen3next nextn block, MODEL_SPEC 4.11). For t < T: the pair
    // (hidden[t] [n_embd], next_tokens[t]) at position pos0 + t goes through the MTP block,
    // whose own KV cache (in state) receives these positions; writes logits [T, n_vocab]
    // and the chained hidden state [T, n_embd] (post shared_head_norm, the vLLM convention:
    // the caller passes the target's final-normed hidden state). Does not touch n_past.
    // last_only: logits_out and hidden_out receive only the last pair's row ([n_vocab],
    // [n_embd]: a drafter's catch-up needs no more), and the other pairs only put their K
    // and V into the block's cache (its attention and MoE run for the last row alone, or
    // for none when neither output is asked; the same floats as the whole window's last
    // row). Null logits_out: no LM head; null hidden_out: no copy.
    // draft_rows (> 0, a multiple of 256, below n_vocab): the head ranks only the first
    // draft_rows token ids (a draft vocabulary, engine/speculative/draft_vocab.h: a prefix
    // of the head's rows is a view of the same memory on every backend, whole packed row
    // groups and GPU tiles) and each logits row is -inf past them; 0: every id.
    // The default (models without an MTP block) throws.
    virtual bool has_mtp() const { return false; }
    virtual void mtp_forward(ForwardCtx& ctx, SeqState& state, const float* hidden, const int32_t* next_tokens,
                             int64_t T, int64_t pos0, float* logits_out, float* hidden_out,
                             bool last_only = false, int64_t draft_rows = 0) const;

    // Rollback of a verify window from its GdnLog (Runner::rollback): whether the stage
    // holding w can rebuild state s for the window's first n rows without running its
    // layers (no recurrent layer; or the log holds n rows of each and their weights are
    // resident, not streamed), and the rebuild itself, on a state just restored to the
    // window's start (advances the recurrent layers only; n_past is the caller's).
    bool can_replay_log(const StageWeights& w, const SeqState& s, int64_t n) const;
    virtual void replay_log(ForwardCtx&, SeqState&, int64_t) const {}

protected:
    Model(GgufFile file, std::unique_ptr<GgufFile> mtp_file);
    virtual void layer(ForwardCtx& ctx, const Batch& batch, int64_t il, float* x) const = 0;
    // The architecture's part of bind(): layer il's weights (its MTP block's), every one
    // walked through p in an order fixed by the architecture.
    virtual std::unique_ptr<LayerWeights> place_layer(WeightPlacer& p, int64_t il) const = 0;
    virtual std::unique_ptr<LayerWeights> place_mtp(WeightPlacer&) const { return nullptr; }

    GgufFile file_;
    HParams hp_;
    // The file's views (in the mapping); each stage prepares its own (bind).
    MatView tok_embd_;                // [n_embd, n_vocab]
    MatView output_;                  // [n_embd, n_vocab]; token_embd when tied
    WeightVec output_norm_;  // [n_embd], as read (StageWeights::output_norm: prepared)
    WeightVec rope_freqs_;   // [n_rot / 2] when the file has rope_freqs.weight
    std::set<std::string> bound_;  // every tensor the model reads (WeightBinder)
    std::unique_ptr<GgufFile> mtp_file_;  // the MTP sidecar (null: none)
    std::set<std::string> mtp_bound_;     // the sidecar's tensors read, as bound_
    // The binder of the MTP block's tensors (in the sidecar when there is one).
    WeightBinder mtp_binder() { return mtp_file_ ? WeightBinder(*mtp_file_, mtp_bound_) : WeightBinder(file_, bound_); }

private:
    std::unique_ptr<StageWeights> bind_weights(Ops& ops, int64_t l0, int64_t l1, bool embed, bool head,
                                               const StagePlacement* placement) const;
    // The embedding table, the head and the MTP block (as embed / head ask) into w.
    void place_fixed(WeightPlacer& p, StageWeights& w) const;
    // A tensor of the file that no binding read would be computed as if absent: a load
    // error naming it, so no file is ever computed wrongly in silence.
    void check_bound() const;
};

}  // namespace strata
