// What the engine's scheduler takes and gives: a request, its stream of events, the
// engine's options and counters. The Engine facade (engine/engine.h) and the server use
// them; the scheduler (engine/serve/scheduler.*) implements them.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/sample/compiled_grammar.h"
#include "engine/sample/sampler.h"

namespace strata {

struct Draft;  // engine/speculative/mtp_drafter.h

// A request the engine refuses. Busy and Unavailable are retryable (HTTP 503);
// Invalid is the caller's fault (HTTP 400).
class EngineError : public Error {
public:
    enum class Kind { Invalid, Busy, Unavailable };
    EngineError(Kind k, const std::string& msg, std::string param = {})
        : Error(msg), kind(k), param(std::move(param)) {}
    Kind kind;
    std::string param;  // the request field at fault, when there is one
};

struct Request {
    std::vector<int32_t> prompt;    // token ids, BOS included when the model wants it
    SamplingParams sampling;
    int64_t max_tokens = -1;        // -1: until the context is full
    std::vector<std::string> stop;  // generation ends before any of these; never emitted
    int top_logprobs = -1;          // -1: no logprobs; else the alternatives per token (0..20)
    // Speculative decoding (docs/server.md): drafts per verify window; -1 = the engine's
    // default (EngineOptions::spec_draft), 0 = off. Off anyway without an MTP head or
    // with penalties.
    int64_t spec_draft = -1;
    // Keep generating past end-of-generation tokens (they are emitted as text) until
    // max_tokens, a stop string or the context ends it: fixed-length runs for benchmarks.
    bool ignore_eos = false;
    // Constrained decoding (structured output, forced tool calls): every token is one
    // the grammar allows, and end-of-generation only once the text is complete. Such a
    // request decodes plainly (no speculative drafts).
    std::shared_ptr<const CompiledGrammar> grammar;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
    int32_t token = 0;
    std::string text;    // the token's bytes (may be part of a UTF-8 character)
    float logprob = 0;   // log-probability from the post-penalty logits at temperature 1
    std::vector<std::pair<std::string, float>> top;  // most likely alternatives, best first
};

struct Usage {
    int64_t prompt_tokens = 0, completion_tokens = 0;
    double queue_seconds = 0;   // submit -> slot
    double ttft_seconds = 0;    // submit -> first generated token
    double prompt_seconds = 0;  // slot -> first generated token
    double decode_seconds = 0;  // first -> last generated token
    int64_t spec_drafted = 0, spec_accepted = 0;  // speculative decoding: drafts proposed, kept
    int64_t cached_tokens = 0;  // prompt tokens the slot's cached prefix supplied
    double decode_tps() const {
        return decode_seconds > 0 && completion_tokens > 1 ? static_cast<double>(completion_tokens - 1) / decode_seconds
                                                           : 0;
    }
};

struct Event {
    enum class Kind { Text, Done };
    Kind kind = Kind::Text;
    std::string text;                    // Text: valid UTF-8, stop strings removed
    std::vector<TokenLogprob> logprobs;  // Text: the tokens behind this text (when asked)
    FinishReason finish = FinishReason::Stop;  // Done
    Usage usage;                         // Done
    std::string error;                   // Done with FinishReason::Error
    // Done with FinishReason::Error: what failed. Handoff: a stage hand-off timed out
    // (the request's fault only in that it was in the window; HTTP 400 as the design
    // says); Restarted: the watchdog restarted the engine (retryable, HTTP 503).
    enum class ErrorKind { Internal, Handoff, Restarted };
    ErrorKind error_kind = ErrorKind::Internal;
};

// The caller's end of one request: a thread-safe channel of events, written by the
// scheduler thread. The last event is always Done.
class RequestStream {
public:
    // Waits up to `timeout` for the next event (after wake_at_done: for Done to be
    // queued), then hands over the oldest queued event; nullopt when none is.
    std::optional<Event> next(std::chrono::milliseconds timeout);
    // The caller wants the whole answer, not each token as it comes (a response that is
    // not streamed): push() then wakes it only for the last event, Done, and next()
    // waits for that, or for its timeout, before it hands over the text events queued
    // ahead of Done. A wake-up per token put the caller's thread on a core that the
    // engine's threads were using: a whole response of 1000 tokens at ~900 tok/s came
    // 1.00-1.06x faster without them in 9 of 10 alternated rounds (docs/server.md).
    void wake_at_done();
    // A streamed response's reader: every event queued so far, oldest first, waiting up
    // to `timeout` for the first one (empty when none came). After pace(gap), a take()
    // that follows one which handed something over first waits until `gap` has passed
    // since then, woken before that only by Done, so that the events of those
    // milliseconds go out together: one wake-up and one write for several tokens
    // instead of one each. The first token is never held back.
    std::vector<Event> take(std::chrono::milliseconds timeout);
    void pace(std::chrono::microseconds gap);
    // Asks the scheduler to stop this request at its next token; its slot is freed and
    // it ends with FinishReason::Cancelled.
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

    // Scheduler side.
    void push(Event e);

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Event> events_;
    std::atomic<bool> cancelled_{false};
    bool done_only_ = false;  // wake_at_done()
    bool done_in_ = false;    // Done is queued
    bool pacing_ = false;     // take() waits out its gap: push() wakes it only for Done
    std::chrono::microseconds gap_{0};
    std::chrono::steady_clock::time_point last_take_{};  // when take() last handed events over
};

struct EngineOptions {
    int n_parallel = 1;    // slots: requests decoding together
    int queue_limit = 16;  // requests waiting beyond the slots; more -> Busy
    int64_t n_batch = 256; // tokens per window (prompt chunks share it with decode tokens)
    // Speculative decoding for requests that do not set spec_draft (--spec-draft):
    // 0 = off, -1 = 3 when the model has an MTP head, else off.
    int spec_draft = -1;
    float spec_draft_min_p = 0;  // --spec-draft-min-p
    // The default K of a greedy request weighs its windows' measured cost (SpecPolicy,
    // "Cost"); false: by acceptance alone (tests that count windows).
    bool spec_timed = true;
    // A request starts in the free slot whose sequence already holds the longest prefix
    // of its prompt, and skips that prefix (--no-prompt-cache: off).
    bool prompt_cache = true;
    // The prompt cache's host-RAM level (engine/serve/prompt_store.h): copies of slots'
    // states kept within this many bytes (0: none), and, for models with a recurrent
    // state, a checkpoint every cache_every prompt tokens (0: only where a prompt ends).
    size_t cache_ram = 0;
    int64_t cache_every = 0;
    // One window through every slot before the first request, then reset (Scheduler::
    // warm_up); tests that count the runner's own work turn it off.
    bool warm_up = true;
    // Test seam (SpecOptions::edit_draft): called with the request's prompt, the verify
    // window's first position, the round's k and the drafts, which it may rewrite.
    std::function<void(std::span<const int32_t> prompt, int64_t pos, int k, Draft&)> spec_edit_draft = {};
};

struct EngineStats {
    int64_t queued = 0, active = 0;
    int64_t windows = 0;            // windows run so far
    int64_t restarts = 0;           // engine restarts by the split's host watchdog
    int64_t handoff_waits = 0, handoff_timeouts = 0;  // stage hand-offs (split runners)
    int64_t generated_tokens = 0;
    double busy_seconds = 0;        // time spent in windows
    // Speculative decoding: verify windows (counted in `windows` too), draft tokens
    // proposed, drafts the target kept.
    int64_t spec_windows = 0, spec_drafted = 0, spec_accepted = 0;
    // Plain steps a one-draft verify window costs, as the last greedy request with timed
    // windows measured it (0: none yet); later requests' probes count against it
    // (SpecPolicyParams::window_cost_k1).
    double spec_window_cost_k1 = 0;
    // Pipelined verify windows (--pipeline-windows 2): windows started on stage 0 before
    // the previous verdict, those kept, those rolled back.
    int64_t pipeline_early = 0, pipeline_kept = 0, pipeline_rolled_back = 0;
    // Prompt tokens taken from a slot's cached prefix instead of evaluated.
    int64_t prompt_cached_tokens = 0;
    // The host-RAM level (--cache-ram): bytes held, entries, states saved, prompts that
    // took their prefix from it (and its tokens), entries dropped for room.
    int64_t cache_ram_bytes = 0, cache_ram_entries = 0, cache_ram_saves = 0, cache_ram_hits = 0,
            cache_ram_tokens = 0, cache_ram_evictions = 0;
    // Streamed layers and device memory (Runner::Stats).
    int64_t stream_copies = 0, stream_bytes = 0, prefetch_hits = 0, sync_loads = 0;
    double stream_wait_ms = 0;
    int64_t device_peak_bytes = 0;
    int64_t expert_rows_host = 0, expert_rows_device = 0;  // --cpu-moe: host rows, device cache hits
    int64_t graph_replayed = 0, graph_captured = 0, graph_direct = 0;  // GPU stages' graphs (Runner::Stats)
};

}  // namespace strata
