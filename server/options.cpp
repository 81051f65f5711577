#include "server/options.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace strata::server {

Flags server_flags() {
    std::vector<FlagSpec> own = {
        {"--host", "ADDR", "127.0.0.1", "address to listen on"},
        {"--port", "N", "8080", "port to listen on (0 = any free port)"},
        {"--parallel", "N", "1", "slots: conversations decoded together in one window", "-np"},
        {"--queue", "N", "16", "requests waiting beyond the slots; more get HTTP 503"},
        {"--api-key", "KEY", "", "require 'Authorization: Bearer KEY' (GET /health stays public)"},
        {"--api-key-file", "FILE", "", "read the API key from the first line of FILE"},
        {"--max-body", "BYTES", "8388608", "largest request body; larger ones get HTTP 413"},
        {"--max-head", "BYTES", "65536", "largest request line plus headers; larger ones get HTTP 431"},
        {"--max-headers", "N", "100", "most header lines in a request; more get HTTP 431"},
        {"--head-timeout-ms", "MS", "10000", "time a request's head gets to arrive, from its first byte (then HTTP 408)"},
        {"--body-timeout-ms", "MS", "60000", "time a request's body gets to arrive, after its head (then HTTP 408)"},
        {"--idle-timeout-ms", "MS", "5000", "time a keep-alive connection may wait for its next request"},
        {"--max-connections", "N", "1024", "open client connections; more wait in the listen backlog"},
        {"--alias", "NAME", "", "model id in the API (default: the model file's name without .gguf)"},
        {"--chat-template", "NAME", "", "chat template to use instead of the model's"},
        {"--stream-interval-ms", "MS", "10", "a streamed response sends the tokens of each MS milliseconds in one write, the first token at once (0 = every token as it comes)"},
        {"--grace-ms", "MS", "10000", "on SIGINT/SIGTERM, time requests in flight get to finish before they are cancelled"},
        {"--no-prompt-cache", "", "", "do not reuse the prefix of a prompt that a slot's sequence already holds"},
        {"--cache-ram", "MIB", "8192", "host memory for slots' states kept after their slot moved on, reused by a prompt that comes back to them (0 = off)"},
        {"--cache-every", "N", "2048", "models with a recurrent state: keep a state every N prompt tokens in that memory too (0 = only where a prompt ends)"},
        {"--special-in-content", "", "", "let chat messages spell control tokens such as <|im_end|> (trusted clients only; by default they are text)"},
        {"--demo", "", "", "serve the built-in demo model (random weights; made once into ~/.cache/strata)"},
    };
    return Flags("strata-server",
                 "strata-server (-m MODEL | --demo) [--host ADDR] [--port N] [--parallel N] [-c CTX] [--api-key K]",
                 concat(concat(concat(own, runner_flags()), sampling_flags()), spec_flags()));
}

ServerOptions server_options(const Flags& f) {
    ServerOptions o;
    o.host = f.str("--host");
    o.port = static_cast<int>(f.integer_in("--port", 0, 65535));
    o.engine.n_parallel = static_cast<int>(f.integer_in("--parallel", 1, 256));
    o.engine.queue_limit = static_cast<int>(f.integer_in("--queue", 0, 100000));
    o.max_body = static_cast<size_t>(f.integer_in("--max-body", 1024, int64_t{1} << 32));
    o.grace_ms = f.integer_in("--grace-ms", 0, 3600000);
    o.stream_interval_ms = f.integer_in("--stream-interval-ms", 0, 1000);
    o.listen.limits.max_head = static_cast<size_t>(f.integer_in("--max-head", 1024, int64_t{1} << 24));
    o.listen.limits.max_headers = static_cast<size_t>(f.integer_in("--max-headers", 8, 10000));
    o.listen.head_timeout = std::chrono::milliseconds(f.integer_in("--head-timeout-ms", 100, 3600000));
    o.listen.body_timeout = std::chrono::milliseconds(f.integer_in("--body-timeout-ms", 100, 3600000));
    o.listen.idle_timeout = std::chrono::milliseconds(f.integer_in("--idle-timeout-ms", 100, 3600000));
    o.listen.max_connections = static_cast<size_t>(f.integer_in("--max-connections", 4, 100000));
    o.alias = f.str("--alias");
    o.chat_template = f.str("--chat-template");
    o.demo = f.on("--demo");
    o.special_in_content = f.on("--special-in-content");
    o.engine.prompt_cache = !f.on("--no-prompt-cache");
    o.engine.cache_ram = static_cast<size_t>(f.integer_in("--cache-ram", 0, int64_t{1} << 24)) << 20;
    o.engine.cache_every = f.integer_in("--cache-every", 0, int64_t{1} << 30);
    if (f.given("--api-key") && f.given("--api-key-file"))
        throw UsageError("give --api-key or --api-key-file, not both");
    o.api_key = f.str("--api-key");
    if (f.given("--api-key-file")) {
        std::ifstream in(f.str("--api-key-file"));
        if (!in) throw UsageError(fmt::format("cannot read --api-key-file '{}'", f.str("--api-key-file")));
        std::getline(in, o.api_key);
        while (!o.api_key.empty() && (o.api_key.back() == '\r' || o.api_key.back() == ' ')) o.api_key.pop_back();
        if (o.api_key.empty()) throw UsageError("--api-key-file holds an empty key");
    }
    if (o.demo == f.given("--model")) throw UsageError("give exactly one of -m MODEL and --demo");
    o.runner = runner_options(f);
    o.runner.max_sequences = o.engine.n_parallel;  // a budget holds the state of every slot
    o.engine.n_batch = o.runner.n_batch;
    const SpecFlags sf = spec_options(f);
    o.engine.spec_draft = sf.draft;
    o.engine.spec_draft_min_p = sf.draft_min_p;
    o.sampling = sampling_options(f);
    if (o.alias.empty() && !o.demo) o.alias = std::filesystem::path(o.runner.model_path).stem().string();
    if (o.alias.empty()) o.alias = "strata-demo";
    return o;
}

}  // namespace strata::server
