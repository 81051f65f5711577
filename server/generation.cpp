#include "server/generation.h"

#include <atomic>
#include <chrono>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "server/api_error.h"

namespace strata::server {

using nlohmann::json;
using namespace std::chrono_literals;

// How often a waiting stream looks at its client: a client that disconnects is
// noticed within this time (or at the next token's write, whichever comes first).
constexpr auto kPoll = 50ms;

json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json timings_json(const Usage& u) {
    json t = {{"prompt_n", u.prompt_tokens},
              {"prompt_ms", u.prompt_seconds * 1e3},
              {"ttft_ms", u.ttft_seconds * 1e3},
              {"predicted_n", u.completion_tokens},
              {"predicted_ms", u.decode_seconds * 1e3},
              {"predicted_per_second", u.decode_tps()}};
    if (u.spec_drafted > 0) {  // llama.cpp's names, present when the request drafted
        t["draft_n"] = u.spec_drafted;
        t["draft_n_accepted"] = u.spec_accepted;
    }
    return t;
}

static json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
}

Generation::Generation(GenerationMeta meta, std::shared_ptr<Engine> engine, std::shared_ptr<RequestStream> stream,
                       Metrics& metrics)
    : meta_(std::move(meta)), engine_(std::move(engine)), stream_(std::move(stream)), metrics_(metrics),
      split_(meta_.thinking, meta_.opens_think),
      tools_(meta_.tool_syntax, "call_" + meta_.id.substr(meta_.id.find('-') + 1) + "_", meta_.max_tool_calls) {}

Generation::~Generation() {
    if (done_) return;
    // The client went away (or the handler failed): cancel, and wait for the engine
    // to confirm so that the metrics count the cancellation. The scheduler ends a
    // cancelled request at its next window; the bound only guards against a hang.
    stream_->cancel();
    for (int i = 0; i < 200; ++i) {
        std::optional<Event> ev = stream_->next(kPoll);
        if (ev && ev->kind == Event::Kind::Done) {
            finished(*ev);
            return;
        }
    }
}

json Generation::logprobs_json(const std::vector<TokenLogprob>& lps) const {
    // json::dump would throw on invalid UTF-8 in a token split mid-character: replace.
    auto text = [](const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); };
    if (meta_.chat) {
        json content = json::array();
        for (const TokenLogprob& t : lps) {
            json top = json::array();
            for (const auto& [s, lp] : t.top)
                top.push_back({{"token", json::parse(text(s))}, {"logprob", lp}, {"bytes", bytes_of(s)}});
            content.push_back({{"token", json::parse(text(t.text))},
                               {"logprob", t.logprob},
                               {"bytes", bytes_of(t.text)},
                               {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json tokens = json::array(), lp = json::array(), top = json::array();
    for (const TokenLogprob& t : lps) {
        tokens.push_back(json::parse(text(t.text)));
        lp.push_back(t.logprob);
        json alt = json::object();
        for (const auto& [s, l] : t.top) alt[json::parse(text(s)).get<std::string>()] = l;
        top.push_back(alt);
    }
    return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}};
}

json Generation::tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool delta) {
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json c = {{"id", calls[i].id},
                  {"type", "function"},
                  {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (delta) c["index"] = first_index + i;  // streamed calls are numbered
        out.push_back(std::move(c));
    }
    return out;
}

json Generation::chunk(json delta_or_text, const json& finish, const std::vector<TokenLogprob>* lps) const {
    json choice = {{"index", 0}};
    if (meta_.chat) choice["delta"] = std::move(delta_or_text);
    else choice["text"] = std::move(delta_or_text);
    choice["logprobs"] = lps && meta_.logprobs ? logprobs_json(*lps) : json();
    choice["finish_reason"] = finish;
    json j = {{"id", meta_.id},
              {"object", meta_.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", meta_.created},
              {"model", meta_.model},
              {"choices", json::array({choice})}};
    if (meta_.include_usage) j["usage"] = nullptr;  // OpenAI: null on all but the last chunk
    return j;
}

void Generation::finished(const Event& done) {
    done_ = true;
    metrics_.on_finish(done.usage, done.finish);
}

static ApiError failure(const Event& done) {
    if (done.finish == FinishReason::Cancelled)
        return ApiError(503, "the request was cancelled: the server is shutting down", {}, "unavailable");
    if (done.error_kind == Event::ErrorKind::Restarted) return ApiError(503, done.error, {}, "engine_restarted");
    if (done.error_kind == Event::ErrorKind::Handoff) return ApiError(400, done.error, {}, "handoff_failed");
    return ApiError(500, "generation failed: " + done.error);
}

json Generation::collect(const std::function<bool()>& client_gone) {
    stream_->wake_at_done();  // the text events are read when Done is in (or at a poll)
    std::string content, reasoning;
    std::vector<TokenLogprob> lps;
    auto next_check = std::chrono::steady_clock::now();
    for (;;) {
        std::optional<Event> ev = stream_->next(kPoll);
        // Check the client every poll interval, whether or not tokens are flowing.
        if (client_gone && std::chrono::steady_clock::now() >= next_check) {
            next_check = std::chrono::steady_clock::now() + kPoll;
            if (!stream_->cancelled() && client_gone()) stream_->cancel();
        }
        if (!ev) continue;
        if (ev->kind == Event::Kind::Text) {
            ReasoningSplitter::Out o = split_.push(ev->text);
            content += o.content;
            reasoning += o.reasoning;
            for (auto& t : ev->logprobs) lps.push_back(std::move(t));
            continue;
        }
        finished(*ev);
        if (ev->finish == FinishReason::Error || ev->finish == FinishReason::Cancelled) throw failure(*ev);
        ReasoningSplitter::Out o = split_.flush();
        content += o.content;
        reasoning += o.reasoning;
        // Tool calls come out of the answer whole, once it is complete.
        std::vector<ToolCall> calls;
        if (meta_.tool_syntax != ToolSyntax::None) {
            ToolCallParser::Out a = tools_.push(content), b = tools_.flush();
            content = a.content + b.content;
            calls = std::move(a.calls);
            for (auto& c : b.calls) calls.push_back(std::move(c));
        }
        const char* finish = calls.empty() ? finish_reason_name(ev->finish) : "tool_calls";
        json choice = {{"index", 0},
                       {"logprobs", meta_.logprobs ? logprobs_json(lps) : json()},
                       {"finish_reason", finish}};
        if (meta_.chat) {
            json msg = {{"role", "assistant"}, {"content", content}};
            if (!calls.empty()) {
                // OpenAI sends null content with calls unless the model also wrote text.
                const bool blank = content.find_first_not_of(" \n\t\r") == std::string::npos;
                msg["content"] = blank ? json() : json(content);
                msg["tool_calls"] = tool_calls_json(calls, 0, false);
            }
            if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
            choice["message"] = msg;
        } else {
            choice["text"] = content;
        }
        return {{"id", meta_.id},
                {"object", meta_.chat ? "chat.completion" : "text_completion"},
                {"created", meta_.created},
                {"model", meta_.model},
                {"choices", json::array({choice})},
                {"usage", usage_json(ev->usage)},
                {"timings", timings_json(ev->usage)}};
    }
}

bool Generation::pump_sse(httplib::DataSink& sink) {
    // Nothing may leave a content provider: httplib runs it outside its handlers' catch.
    try {
        return pump_sse_events(sink);
    } catch (...) {
        static std::atomic<bool> logged{false};
        try {
            std::rethrow_exception(std::current_exception());
        } catch (const std::exception& e) {
            if (!logged.exchange(true)) spdlog::error("streaming a response failed: {}", e.what());
        } catch (...) {
        }
        stream_->cancel();
        const std::string s = "data: " + error_body(ApiError(500, "internal error while streaming the response")) + "\n\n";
        sink.write(s.data(), s.size());
        return false;
    }
}

bool Generation::pump_sse_events(httplib::DataSink& sink) {
    // The chunks of one take() (every event queued since the last) go out in one write.
    std::string out;
    auto send = [&](const json& j) {
        out += "data: ";
        out += j.dump(-1, ' ', false, json::error_handler_t::replace);
        out += "\n\n";
    };
    auto write = [&] {
        const bool ok = out.empty() || sink.write(out.data(), out.size());
        out.clear();
        return ok;
    };
    auto gone = [&] {
        stream_->cancel();  // the scheduler frees the slot at its next window
        return false;
    };
    // The role comes first, in a chunk of its own, as OpenAI sends it.
    if (meta_.chat) send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
    if (!write()) return gone();
    // Every token's logprobs are sent, in order, whether or not its text is: a token
    // that prints nothing (or whose text the splitter holds back) rides on a chunk with
    // empty content.
    auto emit = [&](ReasoningSplitter::Out o, const std::vector<TokenLogprob>* lps, bool final) {
        const bool want_lps = lps && meta_.logprobs;
        if (meta_.chat && meta_.tool_syntax != ToolSyntax::None) {
            // The answer's text passes through the tool-call parser: a call goes out as
            // one delta once its block is complete; text it may still belong to waits.
            ToolCallParser::Out t = tools_.push(o.content);
            if (final) {
                ToolCallParser::Out f = tools_.flush();
                t.content += f.content;
                for (auto& c : f.calls) t.calls.push_back(std::move(c));
            }
            o.content = std::move(t.content);
            if (!t.calls.empty()) {
                send(chunk({{"tool_calls", tool_calls_json(t.calls, n_calls_, true)}}, nullptr, nullptr));
                n_calls_ += t.calls.size();
            }
        }
        if (!meta_.chat) {
            if (!o.content.empty() || want_lps) send(chunk(o.content, nullptr, lps));
            return;
        }
        if (!o.reasoning.empty()) send(chunk({{"reasoning_content", o.reasoning}}, nullptr, o.content.empty() ? lps : nullptr));
        if (!o.content.empty() || (want_lps && o.reasoning.empty())) send(chunk({{"content", o.content}}, nullptr, lps));
    };
    // A reader woken per token takes a core from the engine's threads (docs/server.md,
    // "Cores"): the stream hands over what came in the last interval at once.
    stream_->pace(meta_.stream_interval);
    for (;;) {
        if (!sink.is_writable()) return gone();
        for (Event& ev : stream_->take(kPoll)) {
            if (ev.kind == Event::Kind::Text) {
                emit(split_.push(ev.text), ev.logprobs.empty() ? nullptr : &ev.logprobs, false);
                continue;
            }
            finished(ev);
            if (ev.finish == FinishReason::Error || ev.finish == FinishReason::Cancelled) {
                out += "data: " + error_body(failure(ev)) + "\n\n";
            } else {
                emit(split_.flush(), nullptr, true);
                const char* finish = n_calls_ > 0 ? "tool_calls" : finish_reason_name(ev.finish);
                send(chunk(meta_.chat ? json::object() : json(""), finish, nullptr));
                if (meta_.include_usage) {
                    json u = {{"id", meta_.id},
                              {"object", meta_.chat ? "chat.completion.chunk" : "text_completion"},
                              {"created", meta_.created},
                              {"model", meta_.model},
                              {"choices", json::array()},
                              {"usage", usage_json(ev.usage)},
                              {"timings", timings_json(ev.usage)}};
                    send(u);
                }
            }
            out += "data: [DONE]\n\n";
            if (!write()) return false;
            sink.done();
            return true;
        }
        if (!write()) return gone();
    }
}

}  // namespace strata::server
