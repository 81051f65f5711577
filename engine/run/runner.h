// Runs windows of a model on its device(s). Generation, the server's scheduler and
// speculative decoding talk to a Runner; whether the layers sit on one device or are
// split into stages on several is the Runner's business.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/core/error.h"
#include "engine/model/model.h"

namespace strata {

// Errors a Runner's windows may throw besides strata::Error (a split runner's).

// A window failed at a stage boundary (a hand-off wait ran out, or was aborted). The
// request that owned the window fails; the sequences in it must be reset.
class HandoffError : public Error {
public:
    using Error::Error;
};

// The host watchdog fired: a window did not complete in time. The runner released
// every wait, drained the devices and rebuilt every sequence's state (weights stay
// loaded); whatever was in flight fails with this error.
class EngineRestarted : public Error {
public:
    using Error::Error;
};

class Runner {
public:
    virtual ~Runner() = default;

    virtual const Model& model() const = 0;
    virtual int64_t n_ctx() const = 0;  // positions each sequence holds

    // A sequence is a slot holding its state on every device. Ids are small integers.
    virtual int new_sequence() = 0;
    virtual void free_sequence(int seq) = 0;
    virtual void reset_sequence(int seq) = 0;  // empty again, slot kept
    virtual int64_t n_past(int seq) const = 0;
    // Keeps the first n positions of the sequence (a prompt that shares them with what
    // it holds goes on from there). The KV entries past n need no clearing: the next
    // window overwrites them. A recurrent state (Gated DeltaNet) cannot go back, so a
    // model with one takes only n == n_past (throws otherwise).
    virtual void truncate_sequence(int seq, int64_t n) = 0;

    struct Item {
        int seq;
        std::span<const int32_t> tokens;  // appended at positions n_past(seq)..
        bool all_logits;                  // logits of every token, else of the last only
        float* hidden_out = nullptr;      // optional [n_tokens, n_embd]: post-output-norm hidden rows
    };
    // One window over one or more sequences; logits_rows receives the wanted rows in
    // item order, each n_vocab floats (null: no LM head, e.g. a replay that only
    // rebuilds state). On failure (a bad token, a context overflow, a hand-off timeout)
    // it throws and the sequences in the window are left unchanged or must be reset by
    // the caller, as the error says.
    virtual void eval(std::span<const Item> items, float* logits_rows) = 0;

    // --- Speculative decoding (engine/speculative, docs/spec.md) ---
    // Whether mtp() works: the model has an MTP block (split: it lives on the last stage).
    virtual bool has_mtp() const = 0;
    // Model::mtp_forward on the device holding the MTP block, with that sequence's MTP
    // KV cache: pairs (hidden[t] [n_embd], tokens[t]) at MTP positions pos0 + t, t < T.
    // logits_rows receives [n_vocab], the logits of the LAST pair only (drafting never
    // needs more, and the vocabulary matmul is the cost); hidden_out (optional) the MTP
    // block's post-norm hidden row of the last pair [n_embd]; the other pairs only fill
    // the block's KV cache (Model::mtp_forward's last_only). Does not change n_past.
    // draft_rows (> 0): the head ranks only the first draft_rows ids, -inf past them
    // (Model::mtp_forward).
    virtual void mtp(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0,
                     float* logits_rows, float* hidden_out, int64_t draft_rows) = 0;
    // --spec-draft-vocab as configured (engine/speculative/draft_vocab.h): 0 = every id,
    // N > 0 = the first N, -1 = auto. The drafters read it; mtp() takes their choice.
    virtual int64_t draft_vocab() const { return 0; }
    // Rollback of a verify window. snapshot() saves n_past and the recurrent (GDN conv +
    // delta-rule) state of every stage; restore() puts them back. KV entries past n_past
    // need no copy: the next window overwrites them. The snapshot buffer of a sequence is
    // allocated at its first snapshot and reused; snapshot_bytes() sums them.
    // window_rows > 0: the snapshot is for a verify window of that many rows, the next
    // eval of seq; its Gated DeltaNet inputs are then kept (GdnLog) for rollback().
    virtual void snapshot(int seq, int64_t window_rows = 0) = 0;
    virtual void restore(int seq) = 0;  // throws when seq has no snapshot
    // The state after the first n_keep rows of the window that followed snapshot(seq, rows):
    // the snapshot restored and only the recurrent updates of those rows run again, from
    // their kept inputs (attention layers' KV rows below the new n_past are the window's
    // own). Bit for bit what restore() and a replay of those rows leave. Returns false,
    // changing nothing, where it cannot (no such window kept, a recurrent layer streamed):
    // the caller then restores and replays.
    virtual bool rollback(int seq, int64_t n_keep) = 0;
    virtual size_t snapshot_bytes() const = 0;

    // --- Host copies of a sequence's state (the server's prompt cache, --cache-ram) ---
    // A copy is laid out by stage, then attention layer (the MTP block's included), then
    // KV head: that head's K rows, then its V rows, each run holding room for `cap`
    // positions of which the first p1 - p0 are used. So cap positions of every layer take
    // cap * kv_bytes_per_pos() bytes. The recurrent state (Gated DeltaNet: conv history and
    // delta-rule state of every stage) is recurrent_bytes() more, 0 for a model without one.
    struct KvRange {
        int64_t p0 = 0, p1 = 0;  // positions of the sequence
        uint8_t* host = nullptr;
        int64_t cap = 0;         // positions each run has room for (>= p1 - p0)
    };
    virtual size_t kv_bytes_per_pos() const = 0;
    virtual size_t recurrent_bytes() const = 0;
    // Copies KV rows of the ranges (below n_past) and, when recurrent is not null, the
    // recurrent state into host memory. The sequence is not changed.
    virtual void save_state(int seq, std::span<const KvRange> kv, uint8_t* recurrent) = 0;
    // Writes KV rows of the ranges and the recurrent state (required when the model has
    // one) into the sequence, which then holds n_past positions: the ranges must cover
    // every position below n_past. A snapshot the sequence had is dropped.
    virtual void load_state(int seq, std::span<const KvRange> kv, const uint8_t* recurrent, int64_t n_past) = 0;

    // One line describing the placement ("cpu:0 layers 0-7", "cpu:0 0-3 | cpu:1 4-7").
    virtual std::string describe() const = 0;

    // Counters of the hand-offs between stages (zero for a single device).
    struct Stats {
        int64_t handoff_waits = 0, handoff_timeouts = 0, restarts = 0;
        // Streamed layers (--stream-layers), over every stage: layers copied in, their
        // bytes, copies found prefetched, copies made at the layer's turn, layers still
        // in a slot from the window before, host time waiting for copies.
        int64_t stream_copies = 0, stream_bytes = 0, prefetch_hits = 0, sync_loads = 0, stream_reused = 0;
        double stream_wait_ms = 0;
        int64_t device_peak_bytes = 0;  // the largest peak of a stage's device memory (the meter's)
        // Experts in host memory (--cpu-moe): expert rows computed on the host, rows the
        // device's cache of hot experts computed (its hits), re-rankings of the cache.
        int64_t expert_rows_host = 0, expert_rows_device = 0, expert_reranks = 0;
        // GPU stages' graphs (kernels/cuda/graph.cu): batches of work launched kernel by
        // kernel, captured into a graph, replayed from one.
        int64_t graph_direct = 0, graph_captured = 0, graph_replayed = 0;
    };
    virtual Stats runner_stats() const { return {}; }
    // STRATA_GPU_PROFILE: each GPU stage's times (Ops::profile), empty when off. Call it
    // between evals.
    virtual std::string device_profile() const { return {}; }
};

}  // namespace strata
