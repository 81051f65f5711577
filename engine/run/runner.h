// Runs windows of a model on its device(s). Generation, the server's scheduler and
// speculative decoding talk to a Runner; whether the layers sit on one device or are
// split into stages on several is the Runner's business.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/model/model.h"

namespace strata {

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

    struct Item {
        int seq;
        std::span<const int32_t> tokens;  // appended at positions n_past(seq)..
        bool all_logits;                  // logits of every token, else of the last only
    };
    // One window over one or more sequences; logits_rows receives the wanted rows in
    // item order, each n_vocab floats. On failure (a bad token, a context overflow, a
    // hand-off timeout) it throws and the sequences in the window are left unchanged
    // or must be reset by the caller, as the error says.
    virtual void eval(std::span<const Item> items, float* logits_rows) = 0;

    // One line describing the placement ("cpu:0 layers 0-7", "cpu:0 0-3 | cpu:1 4-7").
    virtual std::string describe() const = 0;

    // Counters of the hand-offs between stages (zero for a single device).
    struct Stats {
        int64_t handoff_waits = 0, handoff_timeouts = 0, restarts = 0;
    };
    virtual Stats runner_stats() const { return {}; }
};

// Everything on one CPU device with `threads` threads.
std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type);

}  // namespace strata
