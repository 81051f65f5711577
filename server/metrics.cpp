#include "server/metrics.h"

#include <fmt/format.h>

namespace strata::server {

void Metrics::on_response(int status) {
    std::lock_guard lk(mu_);
    ++by_status_[status];
}

void Metrics::on_finish(const Usage& u, FinishReason why) {
    std::lock_guard lk(mu_);
    ++by_finish_[finish_reason_name(why)];
    prompt_tokens_ += u.prompt_tokens;
    generated_tokens_ += u.completion_tokens;
    if (u.completion_tokens > 0) {
        ttft_sum_ += u.ttft_seconds;
        ++ttft_count_;
    }
    if (u.completion_tokens > 1) {
        decode_seconds_ += u.decode_seconds;
        decode_tokens_ += u.completion_tokens - 1;
        last_decode_tps_ = u.decode_tps();
    }
}

std::string Metrics::render(const EngineStats& e, bool ready) const {
    std::lock_guard lk(mu_);
    std::string o;
    auto head = [&](const char* name, const char* type, const char* help) {
        o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    // A metric with one value (numbers that need a precision come formatted).
    auto one = [&](const char* name, const char* type, const char* help, const auto& value) {
        head(name, type, help);
        o += fmt::format("{} {}\n", name, value);
    };
    head("strata_requests_total", "counter", "HTTP responses by status code");
    for (const auto& [status, n] : by_status_) o += fmt::format("strata_requests_total{{status=\"{}\"}} {}\n", status, n);
    head("strata_generations_total", "counter", "finished generations by finish reason");
    for (const auto& [why, n] : by_finish_) o += fmt::format("strata_generations_total{{reason=\"{}\"}} {}\n", why, n);
    one("strata_prompt_tokens_total", "counter", "prompt tokens processed", prompt_tokens_);
    one("strata_generated_tokens_total", "counter", "tokens generated", generated_tokens_);
    head("strata_time_to_first_token_seconds", "summary", "from request submission to its first generated token");
    o += fmt::format("strata_time_to_first_token_seconds_sum {:.6f}\nstrata_time_to_first_token_seconds_count {}\n",
                     ttft_sum_, ttft_count_);
    const auto rate = [](double n, double secs) { return fmt::format("{:.3f}", secs > 0 ? n / secs : 0.0); };
    one("strata_decode_tokens_per_second", "gauge", "per-stream decode speed of the last finished request",
        fmt::format("{:.3f}", last_decode_tps_));
    one("strata_decode_tokens_per_second_avg", "gauge", "per-stream decode speed over all finished requests",
        rate(static_cast<double>(decode_tokens_), decode_seconds_));
    one("strata_engine_tokens_per_second", "gauge", "tokens sampled per second of window time, all streams together",
        rate(static_cast<double>(e.generated_tokens), e.busy_seconds));
    one("strata_windows_total", "counter", "windows run by the scheduler", e.windows);
    one("strata_queue_depth", "gauge", "requests waiting for a slot", e.queued);
    one("strata_active_slots", "gauge", "slots decoding a request", e.active);
    one("strata_ready", "gauge", "1 when the engine serves requests, 0 while loading or restarting", ready ? 1 : 0);
    one("strata_engine_restarts_total", "counter", "engine restarts by the watchdog", e.restarts);
    one("strata_spec_windows_total", "counter", "speculative verify windows (a slot decoding alone, MTP drafts)",
        e.spec_windows);
    one("strata_spec_draft_tokens_total", "counter", "draft tokens proposed by the MTP drafter", e.spec_drafted);
    one("strata_spec_accepted_tokens_total", "counter", "draft tokens accepted by verification", e.spec_accepted);
    one("strata_spec_acceptance_ratio", "gauge", "accepted / drafted tokens since start (0 before any draft)",
        fmt::format("{:.4f}", e.spec_drafted > 0 ? static_cast<double>(e.spec_accepted) / static_cast<double>(e.spec_drafted)
                                                 : 0.0));
    one("strata_spec_window_cost_steps", "gauge",
        "plain decode steps a verify window of one draft costs, as the last timed request measured it (0: none yet)",
        fmt::format("{:.3f}", e.spec_window_cost_k1));
    one("strata_pipeline_early_windows_total", "counter",
        "verify windows started on stage 0 before the previous verdict (--pipeline-windows 2)", e.pipeline_early);
    one("strata_pipeline_kept_windows_total", "counter", "early windows kept (the guess was right)", e.pipeline_kept);
    one("strata_pipeline_rolled_back_windows_total", "counter", "early windows rolled back (wrong guess, or forced)",
        e.pipeline_rolled_back);
    one("strata_prompt_cached_tokens_total", "counter", "prompt tokens reused from a slot's cached prefix",
        e.prompt_cached_tokens);
    one("strata_prompt_cache_ram_bytes", "gauge", "host memory held by the prompt cache's saved states (--cache-ram)",
        e.cache_ram_bytes);
    one("strata_prompt_cache_ram_entries", "gauge", "saved states (prefixes) in host memory", e.cache_ram_entries);
    one("strata_prompt_cache_ram_saves_total", "counter", "states saved to host memory", e.cache_ram_saves);
    one("strata_prompt_cache_ram_hits_total", "counter", "prompts whose prefix came back from host memory",
        e.cache_ram_hits);
    one("strata_prompt_cache_ram_tokens_total", "counter", "prompt positions put back from host memory",
        e.cache_ram_tokens);
    one("strata_prompt_cache_ram_evictions_total", "counter", "saved states dropped (least recently used) for room",
        e.cache_ram_evictions);
    one("strata_handoff_waits_total", "counter", "stage hand-off waits (layer split)", e.handoff_waits);
    one("strata_handoff_timeouts_total", "counter", "stage hand-off waits that timed out or were aborted", e.handoff_timeouts);
    one("strata_stream_layer_copies_total", "counter", "streamed layers copied into a device slot (--stream-layers)",
        e.stream_copies);
    one("strata_stream_bytes_total", "counter", "bytes of streamed layers copied to the devices", e.stream_bytes);
    one("strata_stream_prefetch_hits_total", "counter", "streamed layers whose copy was started ahead of their turn",
        e.prefetch_hits);
    one("strata_stream_sync_loads_total", "counter", "streamed layers copied only when their turn came", e.sync_loads);
    one("strata_stream_wait_seconds_total", "counter", "host time spent waiting for streamed layers' copies",
        fmt::format("{:.6f}", e.stream_wait_ms / 1000.0));
    one("strata_device_memory_peak_bytes", "gauge", "the largest peak of a stage's device memory (its meter)",
        e.device_peak_bytes);
    one("strata_expert_rows_host_total", "counter", "MoE expert rows computed on the host (--cpu-moe)",
        e.expert_rows_host);
    one("strata_expert_rows_device_cache_total", "counter",
        "MoE expert rows of host-memory layers computed by the device's cache of hot experts", e.expert_rows_device);
    one("strata_gpu_graph_replays_total", "counter", "batches of a GPU stage's kernels replayed from a graph",
        e.graph_replayed);
    one("strata_gpu_graph_captures_total", "counter", "batches of a GPU stage's kernels captured into a graph",
        e.graph_captured);
    one("strata_gpu_graph_direct_total", "counter", "batches of a GPU stage's kernels launched one by one",
        e.graph_direct);
    return o;
}

}  // namespace strata::server
