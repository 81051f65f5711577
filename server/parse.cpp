#include "server/parse.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "engine/sample/json_schema.h"
#include "server/api_error.h"

namespace strata::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

// A present, non-null field.
const json* field(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The value at path in the body parsed again keeping its key order (the order of a
// schema's properties and of a tool's keys matters; nlohmann::json sorts them). The
// caller has checked the path with the sorted parse.
nlohmann::ordered_json ordered_field(const std::string& body, std::initializer_list<const char*> path,
                                     const std::string& param) {
    try {
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(body);
        for (const char* k : path) j = j.at(k);
        return j;
    } catch (const nlohmann::json::exception& e) {
        bad(param, fmt::format("'{}' could not be read: {}", param, e.what()));
    }
}

// j[key] when it is a string, else "" (json::value would throw on another type).
std::string str_or_empty(const json& j, const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

double number(const json& v, const char* key, double lo, double hi) {
    if (!v.is_number()) bad(key, fmt::format("'{}' must be a number", key));
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, d));
    return d;
}

int64_t integer(const json& v, const char* key, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) bad(key, fmt::format("'{}' must be an integer", key));
    const int64_t i = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi) ? hi + 1 : v.get<int64_t>();
    if (i < lo || i > hi) bad(key, fmt::format("'{}' must be in {}..{}, got {}", key, lo, hi, v.dump()));
    return i;
}

bool boolean(const json& v, const char* key) {
    if (!v.is_boolean()) bad(key, fmt::format("'{}' must be true or false", key));
    return v.get<bool>();
}

std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, const std::string& param) {
    try {
        return CompiledGrammar::compile(g);
    } catch (const std::exception& e) {
        bad(param, fmt::format("'{}': {}", param, e.what()));
    }
}

// Fields Strata knows of but does not implement get a message of their own.
const std::set<std::string, std::less<>> kNotImplemented = {
    "functions", "function_call", "logit_bias", "response_format",
    "audio", "modalities", "prediction", "web_search_options", "reasoning_effort", "suffix", "echo", "best_of",
    "service_tier", "store", "metadata"};

void check_fields(const json& j, const std::set<std::string, std::less<>>& allowed) {
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        if (allowed.count(k)) continue;
        // Values that mean "not used" are accepted: they ask for nothing Strata lacks.
        const json& v = it.value();
        if (v.is_null() || (v.is_array() && v.empty()) || (v.is_object() && v.empty())) continue;
        if (k == "response_format" && v.is_object() && str_or_empty(v, "type") == "text") continue;
        if ((k == "echo" || k == "store") && v == false) continue;
        if (k == "best_of" && v == 1) continue;
        if (kNotImplemented.count(k)) bad(k, fmt::format("'{}' is not implemented by Strata", k));
        bad(k, fmt::format("unknown field '{}'", k));
    }
}

std::vector<std::string> stop_list(const json& v) {
    std::vector<std::string> out;
    if (v.is_string()) out.push_back(v.get<std::string>());
    else if (v.is_array()) {
        for (const json& s : v) {
            if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
            out.push_back(s.get<std::string>());
        }
    } else bad("stop", "'stop' must be a string or a list of strings");
    if (out.size() > 4) bad("stop", fmt::format("'stop' holds at most 4 strings, got {}", out.size()));
    for (const auto& s : out)
        if (s.empty()) bad("stop", "'stop' strings must not be empty");
    return out;
}

// The fields chat and completions share.
void common(const json& j, ApiRequest& r, const SamplingParams& defaults) {
    r.engine.sampling = defaults;
    SamplingParams& s = r.engine.sampling;
    if (auto* v = field(j, "model")) {
        if (!v->is_string()) bad("model", "'model' must be a string");
        r.model = v->get<std::string>();
    }
    if (auto* v = field(j, "stream")) r.stream = boolean(*v, "stream");
    if (auto* v = field(j, "stream_options")) {
        if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
        if (!r.stream) bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
        for (auto it = v->begin(); it != v->end(); ++it)
            if (it.key() != "include_usage") bad("stream_options", fmt::format("unknown field 'stream_options.{}'", it.key()));
        if (auto* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
    }
    const int64_t big = std::numeric_limits<int32_t>::max();
    if (auto* v = field(j, "max_tokens")) r.engine.max_tokens = integer(*v, "max_tokens", 1, big);
    if (auto* v = field(j, "max_completion_tokens"))
        r.engine.max_tokens = integer(*v, "max_completion_tokens", 1, big);
    if (auto* v = field(j, "temperature")) s.temperature = static_cast<float>(number(*v, "temperature", 0, 2));
    if (auto* v = field(j, "top_p")) {
        s.top_p = static_cast<float>(number(*v, "top_p", 0, 1));
        if (s.top_p <= 0) bad("top_p", "'top_p' must be in (0, 1]");
    }
    if (auto* v = field(j, "seed")) s.seed = static_cast<uint64_t>(integer(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    if (auto* v = field(j, "stop")) r.engine.stop = stop_list(*v);
    if (auto* v = field(j, "presence_penalty")) s.presence_penalty = static_cast<float>(number(*v, "presence_penalty", -2, 2));
    if (auto* v = field(j, "frequency_penalty")) s.frequency_penalty = static_cast<float>(number(*v, "frequency_penalty", -2, 2));
    if (auto* v = field(j, "n"); v && integer(*v, "n", 1, 128) != 1)
        bad("n", "'n' > 1 is not supported: Strata returns one choice per request; send n requests instead");
    if (auto* v = field(j, "user"); v && !v->is_string()) bad("user", "'user' must be a string");
    // Strata's own sampling fields (llama.cpp's names).
    if (auto* v = field(j, "top_k")) s.top_k = static_cast<int32_t>(integer(*v, "top_k", 0, big));
    if (auto* v = field(j, "min_p")) s.min_p = static_cast<float>(number(*v, "min_p", 0, 1));
    if (auto* v = field(j, "repeat_penalty")) {
        s.repeat_penalty = static_cast<float>(number(*v, "repeat_penalty", 0, 100));
        if (s.repeat_penalty <= 0) bad("repeat_penalty", "'repeat_penalty' must be in (0, 100]");
    }
    if (auto* v = field(j, "penalty_last_n")) s.penalty_last_n = static_cast<int32_t>(integer(*v, "penalty_last_n", -1, big));
    // Drafts per speculative window (0 = off); absent: the server's --spec-draft.
    if (auto* v = field(j, "spec_draft")) r.engine.spec_draft = integer(*v, "spec_draft", 0, 64);
    // A grammar in the text form of engine/sample/grammar.h (llama.cpp's field name).
    if (auto* v = field(j, "grammar")) {
        if (!v->is_string()) bad("grammar", "'grammar' must be a string (the grammar's text)");
        Grammar g;
        try {
            g = Grammar::parse(v->get<std::string>());
        } catch (const std::exception& e) {
            bad("grammar", fmt::format("'grammar': {}", e.what()));
        }
        r.engine.grammar = compile(g, "grammar");
    }
    if (auto* v = field(j, "ignore_eos")) r.engine.ignore_eos = boolean(*v, "ignore_eos");
}

std::string message_content(const json& m, size_t i) {
    const std::string where = fmt::format("messages[{}].content", i);
    auto it = m.find("content");
    if (it == m.end() || it->is_null()) {
        if (str_or_empty(m, "role") == "assistant") return {};
        bad(where, fmt::format("'{}' is missing", where));
    }
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) bad(where, fmt::format("'{}' must be a string or an array of text parts", where));
    std::string out;
    for (size_t k = 0; k < it->size(); ++k) {
        const json& p = (*it)[k];
        const std::string pw = fmt::format("{}[{}]", where, k);
        if (!p.is_object() || !p.contains("type")) bad(pw, fmt::format("'{}' must be an object with a 'type'", pw));
        if (p["type"] != "text") bad(pw + ".type", fmt::format("'{}.type' {} is not supported: only text parts are", pw, p["type"].dump()));
        if (!p.contains("text") || !p["text"].is_string()) bad(pw + ".text", fmt::format("'{}.text' must be a string", pw));
        out += p["text"].get<std::string>();
    }
    return out;
}

// OpenAI function names: letters, digits, '_' and '-', at most 64.
bool valid_function_name(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
    return true;
}

void check_tools(const json& v) {
    if (!v.is_array()) bad("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    std::set<std::string> names;
    for (size_t i = 0; i < v.size(); ++i) {
        const json& t = v[i];
        const std::string w = fmt::format("tools[{}]", i);
        if (!t.is_object() || str_or_empty(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
            bad(w, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{...}}}}", w));
        for (auto it = t.begin(); it != t.end(); ++it)
            if (it.key() != "type" && it.key() != "function") bad(w + "." + it.key(), fmt::format("unknown field '{}.{}'", w, it.key()));
        const json& f = t["function"];
        for (auto it = f.begin(); it != f.end(); ++it)
            if (it.key() != "name" && it.key() != "description" && it.key() != "parameters" && it.key() != "strict")
                bad(w + ".function." + it.key(), fmt::format("unknown field '{}.function.{}'", w, it.key()));
        if (!f.contains("name") || !f["name"].is_string() || !valid_function_name(f["name"].get<std::string>()))
            bad(w + ".function.name", fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-'", w));
        if (!names.insert(f["name"].get<std::string>()).second)
            bad(w + ".function.name", fmt::format("two tools are named '{}'", f["name"].get<std::string>()));
        if (f.contains("description") && !f["description"].is_string())
            bad(w + ".function.description", fmt::format("'{}.function.description' must be a string", w));
        if (f.contains("parameters") && !f["parameters"].is_object())
            bad(w + ".function.parameters", fmt::format("'{}.function.parameters' must be a JSON schema object", w));
        if (f.contains("strict") && !f["strict"].is_boolean())
            bad(w + ".function.strict", fmt::format("'{}.function.strict' must be true or false", w));
    }
}

void tool_choice(const json& v, ApiRequest& r) {
    using TC = ApiRequest::ToolChoice;
    if (v == "none") r.tool_choice = TC::None;
    else if (v == "auto") r.tool_choice = TC::Auto;
    else if (v == "required") r.tool_choice = TC::Required;
    else if (v.is_object() && str_or_empty(v, "type") == "function" && v.contains("function") && v["function"].is_object() &&
             v["function"].contains("name") && v["function"]["name"].is_string()) {
        r.tool_choice = TC::Named;
        r.tool_choice_name = v["function"]["name"].get<std::string>();
    } else {
        bad("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
std::vector<ToolCall> message_tool_calls(const json& v, const std::string& where) {
    if (!v.is_array()) bad(where, fmt::format("'{}' must be an array", where));
    std::vector<ToolCall> out;
    for (size_t k = 0; k < v.size(); ++k) {
        const json& c = v[k];
        const std::string w = fmt::format("{}[{}]", where, k);
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
            bad(w, fmt::format("'{}' must be {{\"id\", \"type\": \"function\", \"function\": {{...}}}}", w));
        const json& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string()) bad(w + ".function.name", fmt::format("'{}.function.name' must be a string", w));
        if (!f.contains("arguments") || !f["arguments"].is_string())
            bad(w + ".function.arguments", fmt::format("'{}.function.arguments' must be a string of JSON", w));
        ToolCall tc;
        tc.id = str_or_empty(c, "id");
        tc.name = f["name"].get<std::string>();
        tc.arguments = f["arguments"].get<std::string>();
        out.push_back(std::move(tc));
    }
    return out;
}

// response_format: text (nothing), json_object, or json_schema {name, schema, strict,
// description}. The schema is read in the client's key order (properties come in it).
std::shared_ptr<const CompiledGrammar> response_format(const json& v, const std::string& body) {
    const std::string P = "response_format";
    if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
        bad(P, "'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
    const std::string type = v["type"].get<std::string>();
    for (auto it = v.begin(); it != v.end(); ++it)
        if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema"))
            bad(P + "." + it.key(), fmt::format("unknown field '{}.{}'", P, it.key()));
    if (type == "text") return nullptr;
    if (type == "json_object") return compile(json_object_grammar(), P);
    if (type != "json_schema") bad(P + ".type", fmt::format("'{}.type' \"{}\" is not supported", P, type));
    const json* js = field(v, "json_schema");
    if (!js || !js->is_object()) bad(P + ".json_schema", "'response_format.json_schema' must be an object");
    for (auto it = js->begin(); it != js->end(); ++it)
        if (it.key() != "name" && it.key() != "schema" && it.key() != "strict" && it.key() != "description")
            bad(P + ".json_schema." + it.key(), fmt::format("unknown field '{}.json_schema.{}'", P, it.key()));
    if (js->contains("name") && !(*js)["name"].is_string()) bad(P + ".json_schema.name", "'response_format.json_schema.name' must be a string");
    if (js->contains("strict") && !(*js)["strict"].is_boolean())
        bad(P + ".json_schema.strict", "'response_format.json_schema.strict' must be true or false");
    const std::string S = P + ".json_schema.schema";
    if (!js->contains("schema") || !(*js)["schema"].is_object()) bad(S, fmt::format("'{}' must be a JSON schema object", S));
    const nlohmann::ordered_json schema = ordered_field(body, {"response_format", "json_schema", "schema"}, S);
    Grammar g;
    try {
        g = json_schema_to_grammar(schema);
    } catch (const std::exception& e) {  // strata::Error, or a JSON value of an unexpected type
        bad(S, fmt::format("'{}': {}", S, e.what()));
    }
    return compile(g, S);
}

}  // namespace

json parse_body(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return j;
}

ApiRequest parse_chat(const std::string& body, const SamplingParams& defaults) {
    const json j = parse_body(body);
    check_fields(j, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed",
                     "stop", "presence_penalty", "frequency_penalty", "stream", "stream_options", "logprobs",
                     "top_logprobs", "n", "user", "top_k", "min_p", "repeat_penalty", "penalty_last_n", "spec_draft",
                     "ignore_eos", "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls",
                     "response_format", "grammar"});
    ApiRequest r;
    r.chat = true;
    common(j, r, defaults);
    auto* msgs = field(j, "messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        const std::string where = fmt::format("messages[{}]", i);
        if (!m.is_object()) bad(where, fmt::format("'{}' must be an object", where));
        static const std::set<std::string, std::less<>> keys = {"role", "content", "name", "reasoning_content",
                                                                  "tool_calls", "tool_call_id"};
        for (auto it = m.begin(); it != m.end(); ++it)
            if (!keys.count(it.key())) bad(where + "." + it.key(), fmt::format("'{}.{}' is not supported", where, it.key()));
        if (!m.contains("role") || !m["role"].is_string()) bad(where + ".role", fmt::format("'{}.role' must be a string", where));
        std::string role = m["role"].get<std::string>();
        if (role == "developer") role = "system";  // OpenAI's newer name for the system role
        if (role != "system" && role != "user" && role != "assistant" && role != "tool")
            bad(where + ".role", fmt::format("'{}.role' must be system, user, assistant or tool, got '{}'", where, role));
        ChatMessage msg;
        msg.role = role;
        const bool calls = role == "assistant" && field(m, "tool_calls");
        if (calls) msg.tool_calls = message_tool_calls(m["tool_calls"], where + ".tool_calls");
        else if (field(m, "tool_calls")) bad(where + ".tool_calls", fmt::format("'{}.tool_calls' is only for assistant messages", where));
        msg.content = message_content(m, i);
        auto str = [&](const char* k) {
            const json* v = field(m, k);
            if (v && !v->is_string()) bad(where + "." + k, fmt::format("'{}.{}' must be a string", where, k));
            return v ? v->get<std::string>() : std::string();
        };
        msg.name = str("name");
        msg.reasoning_content = str("reasoning_content");
        msg.tool_call_id = str("tool_call_id");
        if (role == "tool" && msg.tool_call_id.empty())
            bad(where + ".tool_call_id", fmt::format("'{}.tool_call_id' is required for a tool message", where));
        r.messages.push_back(std::move(msg));
    }
    if (auto* v = field(j, "response_format")) {
        auto g = response_format(*v, body);
        if (g && r.engine.grammar) bad("grammar", "'grammar' and a JSON 'response_format' cannot be combined");
        if (g) r.engine.grammar = std::move(g);
    }
    if (auto* v = field(j, "tools")) {
        check_tools(*v);
        r.tools = ordered_field(body, {"tools"}, "tools");  // the client's key order (ChatOptions::tools)
    }
    if (auto* v = field(j, "tool_choice")) tool_choice(*v, r);
    if (auto* v = field(j, "parallel_tool_calls")) r.parallel_tool_calls = boolean(*v, "parallel_tool_calls");
    using TC = ApiRequest::ToolChoice;
    if (r.tools.empty() && (r.tool_choice == TC::Required || r.tool_choice == TC::Named))
        bad("tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
    if (r.tool_choice == TC::Named) {
        bool found = false;
        for (const auto& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_name;
        if (!found) bad("tool_choice", fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.tool_choice_name));
    }
    if (auto* v = field(j, "logprobs")) r.logprobs = boolean(*v, "logprobs");
    if (auto* v = field(j, "top_logprobs")) {
        if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        r.engine.top_logprobs = static_cast<int>(integer(*v, "top_logprobs", 0, 20));
    } else if (r.logprobs) {
        r.engine.top_logprobs = 0;
    }
    if (auto* v = field(j, "chat_template_kwargs")) {
        if (!v->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        for (auto it = v->begin(); it != v->end(); ++it) {
            if (it.key() != "enable_thinking")
                bad("chat_template_kwargs." + it.key(), fmt::format("'chat_template_kwargs.{}' is not supported", it.key()));
            r.enable_thinking = boolean(it.value(), "chat_template_kwargs.enable_thinking");
        }
    }
    return r;
}

ApiRequest parse_completion(const std::string& body, const SamplingParams& defaults) {
    const json j = parse_body(body);
    check_fields(j, {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "presence_penalty",
                     "frequency_penalty", "stream", "stream_options", "logprobs", "n", "user", "top_k", "min_p",
                     "repeat_penalty", "penalty_last_n", "spec_draft", "ignore_eos", "grammar"});
    ApiRequest r;
    common(j, r, defaults);
    auto* p = field(j, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    const json* one = p;
    if (p->is_array() && !p->empty() && !(*p)[0].is_number()) {  // a list of prompts
        if (p->size() != 1) bad("prompt", "a list of several prompts is not supported; send one request per prompt");
        one = &(*p)[0];
    }
    if (one->is_string()) {
        r.prompt_text = one->get<std::string>();
    } else if (one->is_array()) {
        r.prompt_is_tokens = true;
        for (const json& t : *one) {
            if (!t.is_number_integer()) bad("prompt", "'prompt' must be a string, a list of one string or a list of token ids");
            r.prompt_tokens.push_back(static_cast<int32_t>(integer(t, "prompt", 0, std::numeric_limits<int32_t>::max())));
        }
    } else {
        bad("prompt", "'prompt' must be a string, a list of one string or a list of token ids");
    }
    // The legacy API's logprobs is the number of alternatives (0..5).
    if (auto* v = field(j, "logprobs")) {
        r.logprobs = true;
        r.engine.top_logprobs = static_cast<int>(integer(*v, "logprobs", 0, 5));
    }
    return r;
}

}  // namespace strata::server
