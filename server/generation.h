// One HTTP generation: drains an engine RequestStream and shapes its events as
// OpenAI responses, either one JSON body or server-sent events.
#pragma once
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/parse.h"
#include "engine/text/tool_calls.h"
#include "server/reasoning.h"

namespace httplib {
struct DataSink;
}

namespace strata::server {

struct GenerationMeta {
    std::string id;     // "chatcmpl-..." / "cmpl-..."
    std::time_t created = 0;
    std::string model;
    bool chat = false;
    bool include_usage = false;
    bool logprobs = false;
    bool thinking = false, opens_think = false;
    // Tool calls: the syntax to parse them in (None: no tools offered) and how many to
    // keep (1 with parallel_tool_calls false).
    ToolSyntax tool_syntax = ToolSyntax::None;
    size_t max_tool_calls = SIZE_MAX;
    // A streamed response's events go out at most this often, several tokens to a write
    // (RequestStream::pace; the first token goes at once); 0: each as it comes.
    std::chrono::milliseconds stream_interval{0};
};

class Generation {
public:
    // engine is held so that it outlives the stream even if the server swaps it.
    Generation(GenerationMeta meta, std::shared_ptr<Engine> engine, std::shared_ptr<RequestStream> stream,
               Metrics& metrics);
    ~Generation();  // cancels the request if it is still running

    // Blocks until the request ends; returns the response body. Throws ApiError for a
    // failed or cancelled generation. client_gone, polled while waiting, cancels the
    // request when it says the client has left.
    nlohmann::json collect(const std::function<bool()>& client_gone = {});
    // The SSE content provider: writes every chunk, then "data: [DONE]". Returns
    // false when the client went away (the request is then cancelled).
    bool pump_sse(httplib::DataSink& sink);

private:
    bool pump_sse_events(httplib::DataSink& sink);
    nlohmann::json chunk(nlohmann::json delta_or_text, const nlohmann::json& finish,
                         const std::vector<TokenLogprob>* lps) const;
    nlohmann::json logprobs_json(const std::vector<TokenLogprob>& lps) const;
    static nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool delta);
    void finished(const Event& done);

    GenerationMeta meta_;
    std::shared_ptr<Engine> engine_;
    std::shared_ptr<RequestStream> stream_;
    Metrics& metrics_;
    ReasoningSplitter split_;
    ToolCallParser tools_;
    size_t n_calls_ = 0;  // calls sent so far (their stream indices)
    bool done_ = false;
};

nlohmann::json usage_json(const Usage& u);
// Strata's extra "timings" object (llama.cpp's names): speeds a person wants to see.
nlohmann::json timings_json(const Usage& u);

}  // namespace strata::server
