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
    head("strata_requests_total", "counter", "HTTP responses by status code");
    for (const auto& [status, n] : by_status_) o += fmt::format("strata_requests_total{{status=\"{}\"}} {}\n", status, n);
    head("strata_generations_total", "counter", "finished generations by finish reason");
    for (const auto& [why, n] : by_finish_) o += fmt::format("strata_generations_total{{reason=\"{}\"}} {}\n", why, n);
    head("strata_prompt_tokens_total", "counter", "prompt tokens processed");
    o += fmt::format("strata_prompt_tokens_total {}\n", prompt_tokens_);
    head("strata_generated_tokens_total", "counter", "tokens generated");
    o += fmt::format("strata_generated_tokens_total {}\n", generated_tokens_);
    head("strata_time_to_first_token_seconds", "summary", "from request submission to its first generated token");
    o += fmt::format("strata_time_to_first_token_seconds_sum {:.6f}\nstrata_time_to_first_token_seconds_count {}\n",
                     ttft_sum_, ttft_count_);
    head("strata_decode_tokens_per_second", "gauge", "per-stream decode speed of the last finished request");
    o += fmt::format("strata_decode_tokens_per_second {:.3f}\n", last_decode_tps_);
    head("strata_decode_tokens_per_second_avg", "gauge", "per-stream decode speed over all finished requests");
    o += fmt::format("strata_decode_tokens_per_second_avg {:.3f}\n",
                     decode_seconds_ > 0 ? static_cast<double>(decode_tokens_) / decode_seconds_ : 0.0);
    head("strata_engine_tokens_per_second", "gauge", "tokens sampled per second of window time, all streams together");
    o += fmt::format("strata_engine_tokens_per_second {:.3f}\n",
                     e.busy_seconds > 0 ? static_cast<double>(e.generated_tokens) / e.busy_seconds : 0.0);
    head("strata_windows_total", "counter", "windows run by the scheduler");
    o += fmt::format("strata_windows_total {}\n", e.windows);
    head("strata_queue_depth", "gauge", "requests waiting for a slot");
    o += fmt::format("strata_queue_depth {}\n", e.queued);
    head("strata_active_slots", "gauge", "slots decoding a request");
    o += fmt::format("strata_active_slots {}\n", e.active);
    head("strata_ready", "gauge", "1 when the engine serves requests, 0 while loading or restarting");
    o += fmt::format("strata_ready {}\n", ready ? 1 : 0);
    head("strata_engine_restarts_total", "counter", "engine restarts by the watchdog");
    o += fmt::format("strata_engine_restarts_total {}\n", e.restarts);
    head("strata_spec_windows_total", "counter", "speculative verify windows (a slot decoding alone, MTP drafts)");
    o += fmt::format("strata_spec_windows_total {}\n", e.spec_windows);
    head("strata_spec_draft_tokens_total", "counter", "draft tokens proposed by the MTP drafter");
    o += fmt::format("strata_spec_draft_tokens_total {}\n", e.spec_drafted);
    head("strata_spec_accepted_tokens_total", "counter", "draft tokens accepted by verification");
    o += fmt::format("strata_spec_accepted_tokens_total {}\n", e.spec_accepted);
    head("strata_spec_acceptance_ratio", "gauge", "accepted / drafted tokens since start (0 before any draft)");
    o += fmt::format("strata_spec_acceptance_ratio {:.4f}\n",
                     e.spec_drafted > 0 ? static_cast<double>(e.spec_accepted) / static_cast<double>(e.spec_drafted)
                                        : 0.0);
    head("strata_handoff_waits_total", "counter", "stage hand-off waits (layer split)");
    o += fmt::format("strata_handoff_waits_total {}\n", e.handoff_waits);
    head("strata_handoff_timeouts_total", "counter", "stage hand-off waits that timed out or were aborted");
    o += fmt::format("strata_handoff_timeouts_total {}\n", e.handoff_timeouts);
    return o;
}

}  // namespace strata::server
