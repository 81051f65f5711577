// strata-server's command line: its own flags plus every engine flag (runner_flags,
// and sampling_flags as the defaults of requests), declared once here.
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/flags.h"
#include "engine/engine.h"
#include "engine/options.h"
#include "server/listener.h"

namespace strata::server {

Flags server_flags();

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;               // 0: any free port
    std::string api_key;           // empty: no authentication
    size_t max_body = 8u << 20;    // bytes; larger bodies get 413
    std::string alias;             // the model id clients see (default: the file's stem)
    std::string chat_template;     // by name; empty = the model's own
    int64_t grace_ms = 10000;      // on SIGINT/SIGTERM, how long requests in flight may finish
    int64_t stream_interval_ms = 10;  // a streamed response's writes at most this often (0: per token)
    bool demo = false;
    bool special_in_content = false;  // message texts may spell control tokens (trusted clients)
    ListenerOptions listen;        // limits and timeouts of connections (host, port, body: above)
    EngineOptions engine;
    RunnerOptions runner;
    SamplingParams sampling;       // request defaults
};

// Parsed and validated; throws UsageError. Reads --api-key-file when given.
ServerOptions server_options(const Flags& f);

}  // namespace strata::server
