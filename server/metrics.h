// Counters for GET /metrics (Prometheus text format). Updated by the HTTP layer: the
// status of every response, and each generation's usage when it ends.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/engine.h"

namespace strata::server {

class Metrics {
public:
    void on_response(int status);
    void on_finish(const Usage& u, FinishReason why);
    // ready: the engine is loaded (false while loading or restarting).
    std::string render(const EngineStats& engine, bool ready) const;

private:
    mutable std::mutex mu_;
    std::map<int, int64_t> by_status_;
    std::map<std::string, int64_t> by_finish_;
    int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
    double ttft_sum_ = 0;
    int64_t ttft_count_ = 0;
    double decode_seconds_ = 0;  // sum over requests of their decode time
    int64_t decode_tokens_ = 0;  // tokens after each request's first
    double last_decode_tps_ = 0;
};

}  // namespace strata::server
