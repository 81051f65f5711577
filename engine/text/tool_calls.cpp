#include "engine/text/tool_calls.h"

#include <nlohmann/json.hpp>

namespace strata {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// Length of the longest suffix of s that is a proper prefix of tag: text that may be the
// start of the tag and must wait for the next piece.
size_t partial_tag(std::string_view s, std::string_view tag) {
    for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
        if (tag.starts_with(s.substr(s.size() - n))) return n;
    return 0;
}

// End (one past the closing brace) of the JSON object starting at s[0] == '{', or npos.
size_t object_end(std::string_view s) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{') {
            ++depth;
        } else if (c == '}' && --depth == 0) {
            return i + 1;
        }
    }
    return std::string_view::npos;
}

}  // namespace

ToolSyntax tool_syntax_of_template(std::string_view j) {
    if (j.find(kOpen) != j.npos) return ToolSyntax::Hermes;
    if (j.find(kPythonTag) != j.npos ||
        (j.find("<|start_header_id|>") != j.npos && j.find("\"parameters\"") != j.npos))
        return ToolSyntax::Llama3Json;
    return ToolSyntax::None;
}

const char* tool_syntax_name(ToolSyntax s) {
    switch (s) {
        case ToolSyntax::None: return "none";
        case ToolSyntax::Hermes: return "hermes";
        case ToolSyntax::Llama3Json: return "llama3-json";
    }
    return "?";
}

bool parse_tool_call_json(std::string_view text, std::string& name, std::string& arguments) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    auto n = j.find("name");
    if (n == j.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return false;
    auto a = j.find("arguments");
    if (a == j.end()) a = j.find("parameters");
    if (a == j.end()) {
        arguments = "{}";
    } else if (a->is_object()) {
        arguments = a->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else if (a->is_string()) {  // already JSON text, as OpenAI's own format has it
        const nlohmann::json inner = nlohmann::json::parse(a->get_ref<const std::string&>(), nullptr, false);
        if (inner.is_discarded() || !inner.is_object()) return false;
        arguments = a->get<std::string>();
    } else {
        return false;
    }
    name = n->get<std::string>();
    return true;
}

ToolCallParser::ToolCallParser(ToolSyntax syntax, std::string id_prefix, size_t max_calls)
    : syntax_(syntax), prefix_(std::move(id_prefix)), max_calls_(max_calls) {}

bool ToolCallParser::take(std::string_view name, std::string_view args, Out& out) {
    if (n_calls_ < max_calls_)  // beyond max_calls a call is dropped: the request asked for one
        out.calls.push_back({prefix_ + std::to_string(n_calls_), std::string(name), std::string(args)});
    ++n_calls_;
    return true;
}

ToolCallParser::Out ToolCallParser::push(std::string_view text) {
    held_ += text;
    if (syntax_ == ToolSyntax::Hermes) return hermes(false);
    if (syntax_ == ToolSyntax::Llama3Json) return llama3(false);
    Out out;
    out.content = std::move(held_);
    held_.clear();
    return out;
}

ToolCallParser::Out ToolCallParser::flush() {
    if (syntax_ == ToolSyntax::Hermes) return hermes(true);
    if (syntax_ == ToolSyntax::Llama3Json) return llama3(true);
    return push({});
}

ToolCallParser::Out ToolCallParser::hermes(bool final) {
    Out out;
    std::string_view s = held_;
    for (;;) {
        const size_t open = s.find(kOpen);
        if (open == s.npos) {  // text, keeping back what may be the start of a tag
            const size_t keep = final ? 0 : partial_tag(s, kOpen);
            out.content += s.substr(0, s.size() - keep);
            s.remove_prefix(s.size() - keep);
            break;
        }
        out.content += s.substr(0, open);
        s.remove_prefix(open);
        const size_t close = s.find(kClose);
        // A call that ends the answer without its closing tag (a stop string or the
        // token limit cut it) is still a call when its JSON is whole.
        if (close == s.npos && !final) break;
        const std::string_view body = close == s.npos ? s.substr(kOpen.size()) : s.substr(kOpen.size(), close - kOpen.size());
        const size_t block = close == s.npos ? s.size() : close + kClose.size();
        std::string name, args;
        if (parse_tool_call_json(trim(body), name, args)) take(name, args, out);
        else out.content += s.substr(0, block);  // malformed: given back as text
        s.remove_prefix(block);
    }
    held_ = std::string(s);
    return out;
}

ToolCallParser::Out ToolCallParser::llama3(bool final) {
    Out out;
    if (!started_) {
        // The answer is a call when it opens with a JSON object or the python tag; wait
        // while it is only whitespace or what may still become the tag.
        const std::string_view t = trim(held_);
        if (!final && (t.empty() || (t.size() < kPythonTag.size() && kPythonTag.starts_with(t)))) return out;
        started_ = true;
        json_mode_ = t.starts_with('{') || t.starts_with(kPythonTag);
    }
    if (!json_mode_) {
        out.content = std::move(held_);
        held_.clear();
        return out;
    }
    if (!final) return out;
    std::string_view s = trim(held_);
    if (s.starts_with(kPythonTag)) s = trim(s.substr(kPythonTag.size()));
    std::vector<std::pair<std::string, std::string>> calls;
    while (!s.empty()) {  // objects, separated by ';'
        const size_t end = s.starts_with('{') ? object_end(s) : std::string_view::npos;
        std::string name, args;
        if (end == s.npos || !parse_tool_call_json(s.substr(0, end), name, args)) {
            calls.clear();
            break;
        }
        calls.emplace_back(std::move(name), std::move(args));
        s = trim(s.substr(end));
        if (s.starts_with(';')) s = trim(s.substr(1));
        else if (!s.empty()) calls.clear(), s = {};
    }
    if (calls.empty()) out.content = std::move(held_);  // not calls after all: the text as written
    for (const auto& [name, args] : calls) take(name, args, out);
    held_.clear();
    return out;
}

}  // namespace strata
