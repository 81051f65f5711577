// The engine's one scheduler thread: admits queued requests into slots (one Runner
// sequence each) and runs windows over every active slot until each request ends.
// How a window is formed is explained in docs/server.md ("Scheduling").
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/run/runner.h"
#include "engine/serve/prompt_store.h"
#include "engine/serve/request.h"
#include "engine/text/tokenizer.h"
#include "engine/serve/slot.h"

namespace strata {

class Scheduler {
public:
    Scheduler(Runner& runner, const Tokenizer& tok, EngineOptions opt);
    ~Scheduler();  // cancels everything left and joins the thread

    std::shared_ptr<RequestStream> submit(Request r);
    void shutdown(bool cancel_active);
    EngineStats stats() const;

private:
    struct Queued {
        Request req;
        std::shared_ptr<RequestStream> stream;
        std::chrono::steady_clock::time_point submitted;
    };

    void loop();
    // One window of a token per slot (and, with an MTP head, one MTP step each), then
    // every sequence reset: the first request's window no longer pays the first touch
    // of the memory it writes (docs/server.md, "Warm-up").
    void warm_up();
    void admit(std::vector<Queued>& fresh);  // queue -> free slots (under mu_)
    void start_slot(Slot& s, Queued& q, const PromptStore::Match& hit);  // a request takes a free slot
    // The free slot for a prompt: the longest reusable prefix, else the least recently
    // used; *hit: what the host store can put back instead, when that is longer.
    Slot& pick_slot(const std::vector<int32_t>& prompt, PromptStore::Match* hit);
    size_t reusable(const Slot& s, const std::vector<int32_t>& prompt) const;
    // Positions [0, s.prompt_done) are in: a hybrid model's state is saved there, for a
    // next turn (the end of the prompt) or a request that leaves this one's history
    // there (every cache_every tokens, into the host store).
    void checkpoint(Slot& s);
    // A failure is logged. mtp_row: PromptStore::save's.
    void save_to_store(Slot& s, std::span<const int32_t> tokens, std::span<const float> mtp_row = {});
    // The MTP catch-up: the pairs of the prompt read so far, below its last position, to
    // the MTP's KV (a speculative slot's state is then whole where it is saved).
    void feed_mtp(Slot& s);
    // Prompt tokens s may take in its next chunk: up to its next checkpoint.
    size_t chunk_room(const Slot& s, size_t room) const;
    // Its speculative decoder, if it speculates (scheduler_spec.cpp). carry: the hidden
    // row of the position before the prompt's reused prefix ends, with the MTP's pairs
    // below it (empty: none).
    void start_spec(Slot& s, std::span<const float> carry);
    void run_window();
    // One window over the decode tokens of every decoding slot but `skip`, then prompt
    // chunks.
    void batch_window(const Slot* skip);
    // One speculative round of the only decoding slot (Speculator::step).
    void spec_window(Slot& s);
    // Brings a slot's pipelined decoder back to plain decoding's state (Speculator::finish)
    // before the runner does anything else; false when that failed (the request failed).
    bool close_spec(Slot& s);
    // A token of s chosen from `row` (its post-penalty logits). n_past: the sequence's
    // length with every token before t in it. Streams its text, ends the request when
    // t ends it (returns false), else t becomes the token to feed next.
    bool commit(Slot& s, int32_t t, std::span<const float> row, int64_t n_past);
    void log_pause(const Slot& s);  // the default's speculation paused for s (logged once)
    // A window threw: the requests in it fail (all of them after an engine restart).
    void fail_window(const std::exception& ex, std::span<Slot* const> owner);
    void finish(Slot& s, FinishReason why, std::string error = {},
                Event::ErrorKind kind = Event::ErrorKind::Internal);

    Runner& runner_;
    const Tokenizer& tok_;
    EngineOptions opt_;
    std::vector<Slot> slots_;
    std::vector<float> logits_;  // [rows, n_vocab], one row per window item
    std::vector<int32_t> spec_out_;  // tokens one speculative round committed
    std::vector<Runner::Item> items_;  // a batched window's items and the slot of each
    std::vector<Slot*> owner_;
    std::shared_ptr<const TokenVocab> vocab_;
    std::unique_ptr<PromptStore> store_;  // --cache-ram (null: off)
    PromptStore::Stats store_stats_;      // its counters as of its last change (under mu_)
    uint64_t slot_clock_ = 0;  // Slot::last_used  // the tokenizer's pieces for grammars, made at the first one
    bool said_no_mtp_ = false, said_penalties_ = false, said_spec_stopped_ = false;  // each logged once

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Queued> queue_;
    bool accepting_ = true, stop_ = false, cancel_active_ = false;
    int64_t active_ = 0;
    EngineStats stats_;
    double spec_cost_k1_ = 0;  // the last timed estimate of a one-draft window's cost (scheduler thread)
    std::thread thread_;  // last member: started once everything above exists
};

}  // namespace strata
