#include "server/http_server.h"

#include <csignal>
#include <limits>
#include <random>
#include <thread>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "engine/sample/tool_grammar.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/parse.h"
#include "server/peer_watch.h"

namespace strata::server {

using nlohmann::json;
using clock = std::chrono::steady_clock;

// httplib::Server's request handling without its sockets: the Listener frames each
// request and runs it here.
class Router : public httplib::Server {
public:
    // httplib ends a streamed answer at once when its own listening socket is unset
    // ("shutting down"); it has none here, so it gets a value that is never a socket.
    Router() { svr_sock_ = std::numeric_limits<int>::max(); }
    using httplib::Server::process_request;
};

namespace {
// Every route and the methods it takes (HEAD: httplib answers it from the GET handler).
constexpr std::pair<const char*, const char*> kRoutes[] = {
    {"/health", "GET, HEAD"},        {"/v1/models", "GET, HEAD"}, {"/metrics", "GET, HEAD"},
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/tokenize", "POST"},
    {"/detokenize", "POST"},
};

// Start of the request the current httplib worker thread serves (for the access log);
// unset for requests httplib answers before routing (413).
thread_local std::optional<clock::time_point> t_request_start;
}  // namespace

HttpServer::HttpServer(ServerOptions opt) : opt_(std::move(opt)), svr_(std::make_unique<Router>()) {
    // A client that closes its socket mid-stream must not kill the server with SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    id_salt_ = std::random_device{}();
    ListenerOptions lo = opt_.listen;
    lo.limits.max_body = opt_.max_body;
    // One worker per slot and queued request, plus some more: a streaming request holds
    // its worker until it ends, and requests beyond the queue need one to be told 503.
    lo.workers = static_cast<size_t>(opt_.engine.n_parallel + opt_.engine.queue_limit + 8);
    lo.max_pending = std::max(lo.max_pending, 2 * lo.workers);
    listener_ = std::make_unique<Listener>(
        lo,
        [this](httplib::Stream& strm, bool close_connection, bool& connection_closed) {
            return svr_->process_request(strm, close_connection, connection_closed, nullptr);
        },
        [](int status, const std::string& message) { return error_body(ApiError(status, message)); });
    install_error_handling(*svr_, opt_.max_body, [](const std::string& path) {
        for (const auto& [route, methods] : kRoutes)
            if (path == route) return std::string(methods);
        return std::string();
    });
    svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        t_request_start = clock::now();
        if (authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
        write_error(res, ApiError(401, "a valid API key is required: send 'Authorization: Bearer KEY'", {},
                                  "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });
    svr_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        metrics_.on_response(res.status);
        const std::string ms = t_request_start
            ? fmt::format("{:.1f}ms", std::chrono::duration<double, std::milli>(clock::now() - *t_request_start).count())
            : "-";
        spdlog::info("{} {} {} {} {}", req.remote_addr, req.method, req.path, res.status, ms);
        t_request_start.reset();
    });
    routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
    opt_.port = listener_->bind(opt_.host, opt_.port);
    return opt_.port;
}

void HttpServer::listen() { listener_->run(); }

void HttpServer::stop() { listener_->stop(); }

void HttpServer::set_engine(std::shared_ptr<Engine> engine) {
    std::optional<ChatTemplate> tmpl;
    std::string err;
    try {
        tmpl = opt_.chat_template.empty() ? ChatTemplate::for_tokenizer(engine->tokenizer())
                                          : ChatTemplate::from_name(opt_.chat_template);
    } catch (const std::exception& e) {
        err = e.what();
        spdlog::warn("no chat template: {}; /v1/chat/completions will refuse requests", err);
    }
    std::lock_guard lk(mu_);
    engine_ = std::move(engine);
    template_ = std::move(tmpl);
    template_error_ = err;
}

std::shared_ptr<Engine> HttpServer::engine_or_null() const {
    std::lock_guard lk(mu_);
    return engine_;
}

std::shared_ptr<Engine> HttpServer::engine() const {
    auto e = engine_or_null();
    if (!e) throw ApiError(503, "the model is loading; retry shortly", {}, "loading");
    return e;
}

bool HttpServer::authorized(const httplib::Request& req) const {
    if (opt_.api_key.empty() || req.path == "/health") return true;
    const std::string want = "Bearer " + opt_.api_key;
    const std::string got = req.get_header_value("Authorization");
    // Compare in time independent of where the strings differ.
    unsigned diff = static_cast<unsigned>(got.size() ^ want.size());
    for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(want[i]) ^ (i < got.size() ? static_cast<unsigned char>(got[i]) : 0u);
    return diff == 0;
}

void HttpServer::routes() {
    auto json_reply = [](httplib::Response& res, const json& j) { res.set_content(j.dump(), "application/json"); };
    svr_->Get("/health", [this, json_reply](const httplib::Request&, httplib::Response& res) {
        if (!engine_or_null()) throw ApiError(503, "the model is loading", {}, "loading");
        json_reply(res, {{"status", "ok"}});
    });
    svr_->Get("/v1/models", [this, json_reply](const httplib::Request&, httplib::Response& res) {
        auto e = engine();
        json_reply(res, {{"object", "list"},
                         {"data", json::array({{{"id", opt_.alias},
                                                {"object", "model"},
                                                {"created", 0},
                                                {"owned_by", "strata"},
                                                {"meta", {{"n_ctx", e->n_ctx()},
                                                          {"n_vocab", e->model().hp().n_vocab},
                                                          {"n_parallel", e->options().n_parallel}}}}})}});
    });
    svr_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        auto e = engine_or_null();
        res.set_content(metrics_.render(e ? e->stats() : EngineStats{}, e != nullptr), "text/plain; version=0.0.4");
    });
    svr_->Post("/v1/chat/completions",
               [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    svr_->Post("/v1/completions",
               [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    svr_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    svr_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
}

void HttpServer::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto eng = engine();
    ApiRequest ar = chat ? parse_chat(req.body, opt_.sampling) : parse_completion(req.body, opt_.sampling);
    if (!ar.model.empty() && ar.model != opt_.alias)
        throw ApiError(404, fmt::format("the model '{}' does not exist; this server serves '{}'", ar.model, opt_.alias),
                       "model", "model_not_found");
    const Tokenizer& tok = eng->tokenizer();
    GenerationMeta meta;
    meta.chat = chat;
    meta.model = opt_.alias;
    meta.created = std::time(nullptr);
    meta.id = fmt::format("{}-{:x}{:06x}", chat ? "chatcmpl" : "cmpl", id_salt_ & 0xffffffffu, next_id_++);
    meta.include_usage = ar.include_usage;
    meta.logprobs = ar.logprobs;
    meta.stream_interval = std::chrono::milliseconds(opt_.stream_interval_ms);
    Request r = std::move(ar.engine);
    if (chat) {
        std::optional<ChatTemplate> tmpl;
        {
            std::lock_guard lk(mu_);
            tmpl = template_;
        }
        if (!tmpl) throw ApiError(400, "chat is unavailable: " + template_error_ + " (start with --chat-template NAME)");
        ChatOptions co;
        if (ar.enable_thinking) co.enable_thinking = *ar.enable_thinking;
        using TC = ApiRequest::ToolChoice;
        if (!ar.tools.empty() && ar.tool_choice != TC::None) {
            meta.tool_syntax = tool_syntax_of_template(tok.chat_template());
            if (meta.tool_syntax == ToolSyntax::None)
                throw ApiError(400, "this model's chat template has no tool-call format, so 'tools' cannot be used",
                               "tools");
            if (ar.tool_choice == TC::Required || ar.tool_choice == TC::Named) {
                // The call is forced by constrained decoding in the model's own syntax.
                if (r.grammar) throw ApiError(400, "a forced tool call and a JSON 'response_format' cannot be combined",
                                              "tool_choice");
                try {
                    r.grammar = tool_call_grammar(ar.tools, ar.tool_choice == TC::Named ? ar.tool_choice_name : "",
                                                  meta.tool_syntax, ar.parallel_tool_calls);
                } catch (const std::exception& e) {  // strata::Error, or a JSON value of an unexpected type
                    throw ApiError(400, fmt::format("the tools' parameters cannot be enforced: {}", e.what()), "tools");
                }
            }
            co.tools = ar.tools;
            if (!ar.parallel_tool_calls) meta.max_tool_calls = 1;
        }
        // The template's markers are special tokens; the messages' text is text, unless
        // the operator trusts its clients to write control tokens.
        ChatTemplate::Rendered p;
        try {
            p = tmpl->render(ar.messages, co);
        } catch (const Error& e) {  // the template refused these messages (raise_exception, no tool support)
            throw ApiError(400, e.what(), "messages");
        }
        r.prompt = opt_.special_in_content ? tok.encode(p.text, true) : tok.encode(p.text, true, p.literal);
        meta.thinking = tmpl->uses_thinking();
        meta.opens_think = p.opens_think;
    } else {
        r.prompt = ar.prompt_is_tokens ? std::move(ar.prompt_tokens) : tok.encode(ar.prompt_text, false);
    }
    if (tok.add_bos() && !ar.prompt_is_tokens) r.prompt.insert(r.prompt.begin(), tok.bos());
    std::shared_ptr<RequestStream> stream;
    try {
        stream = eng->submit(std::move(r));
    } catch (const EngineError& e) {
        if (chat && e.param == "prompt") throw EngineError(e.kind, e.what(), "messages");
        throw;
    }
    auto gen = std::make_shared<Generation>(std::move(meta), eng, std::move(stream), metrics_);
    if (!ar.stream) {
        // A client that leaves cancels its generation at the next token, as a stream's does.
        PeerWatch peer(Listener::current_fd());
        const json body = gen->collect([&] { return peer.gone(); });
        res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [gen](size_t, httplib::DataSink& sink) { return gen->pump_sse(sink); },
        [gen](bool) {});  // gen's destructor cancels a request that did not end
}

void HttpServer::tokenize(const httplib::Request& req, httplib::Response& res) {
    auto eng = engine();
    const json j = parse_body(req.body);
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "content" && it.key() != "add_special" && it.key() != "parse_special" && it.key() != "model")
            throw ApiError(400, fmt::format("unknown field '{}'", it.key()), it.key());
    if (!j.contains("content") || !j["content"].is_string()) throw ApiError(400, "'content' must be a string", "content");
    auto flag = [&](const char* k) {
        if (!j.contains(k)) return false;
        if (!j[k].is_boolean()) throw ApiError(400, fmt::format("'{}' must be true or false", k), k);
        return j[k].get<bool>();
    };
    const Tokenizer& tok = eng->tokenizer();
    std::vector<int32_t> ids = tok.encode(j["content"].get<std::string>(), flag("parse_special"));
    if (flag("add_special") && tok.add_bos()) ids.insert(ids.begin(), tok.bos());
    res.set_content(json{{"tokens", ids}}.dump(), "application/json");
}

void HttpServer::detokenize(const httplib::Request& req, httplib::Response& res) {
    auto eng = engine();
    const json j = parse_body(req.body);
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "tokens" && it.key() != "model")
            throw ApiError(400, fmt::format("unknown field '{}'", it.key()), it.key());
    if (!j.contains("tokens") || !j["tokens"].is_array()) throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
    const Tokenizer& tok = eng->tokenizer();
    std::vector<int32_t> ids;
    for (const json& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
            throw ApiError(400, fmt::format("'tokens' must hold token ids in 0..{}", tok.n_vocab() - 1), "tokens");
        ids.push_back(t.get<int32_t>());
    }
    res.set_content(json{{"content", tok.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
}

}  // namespace strata::server
