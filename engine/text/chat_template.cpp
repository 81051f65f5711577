#include "engine/text/chat_template.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata {
namespace {

std::string joined_names() { return fmt::format("{}", fmt::join(ChatTemplate::names(), ", ")); }

std::string_view strip(std::string_view s, std::string_view chars, bool left, bool right) {
    while (left && !s.empty() && chars.find(s.front()) != std::string_view::npos) s.remove_prefix(1);
    while (right && !s.empty() && chars.find(s.back()) != std::string_view::npos) s.remove_suffix(1);
    return s;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != s.npos; }

// Qwen's convention for tool results: a user turn made only of <tool_response> blocks
// does not count as the user's query.
bool is_tool_response(const ChatMessage& m) {
    return m.content.starts_with("<tool_response>") && m.content.ends_with("</tool_response>");
}

}  // namespace

const std::vector<std::string_view>& ChatTemplate::names() {
    static const std::vector<std::string_view> n = {"chatml", "qwen2.5", "qwen3", "qwen3-instruct",
                                                    "qwen3-thinking", "llama3"};
    return n;
}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
    ChatTemplate t;
    t.name_ = std::string(name);
    if (name == "chatml") return t;
    if (name == "qwen2.5" || name == "qwen2") {
        t.default_system_ = true;
        return t;
    }
    if (name == "qwen3") {
        t.thinking_switch_ = t.qwen3_history_ = true;
        return t;
    }
    if (name == "qwen3-instruct") {
        t.qwen3_history_ = true;
        return t;
    }
    if (name == "qwen3-thinking") {
        t.forced_think_ = t.qwen3_history_ = true;
        return t;
    }
    if (name == "llama3") {
        t.family_ = Family::Llama3;
        return t;
    }
    fail("unknown chat template name '{}'; choose one of: {}", name, joined_names());
}

ChatTemplate ChatTemplate::detect(std::string_view j) {
    if (contains(j, "<|im_start|>")) {
        // Jinja source spells newlines as the two characters \n inside string literals.
        if (contains(j, "<|im_start|>assistant\\n<think>\\n")) return from_name("qwen3-thinking");
        if (contains(j, "enable_thinking")) return from_name("qwen3");
        if (contains(j, "</think>")) return from_name("qwen3-instruct");
        if (contains(j, "You are Qwen, created by Alibaba Cloud")) return from_name("qwen2.5");
        return from_name("chatml");
    }
    if (contains(j, "<|start_header_id|>") && contains(j, "<|end_header_id|>"))
        return from_name("llama3");
    fail("unsupported chat template; choose one with --chat-template NAME: {}", joined_names());
}

namespace {

// The prompt being rendered: the template's own text, and the messages' text whose
// ranges are recorded.
struct Out {
    ChatTemplate::Rendered r;
    Out& operator+=(std::string_view s) {
        r.text += s;
        return *this;
    }
    void message(std::string_view s) {
        if (s.empty()) return;
        r.literal.emplace_back(r.text.size(), r.text.size() + s.size());
        r.text += s;
    }
};

}  // namespace

ChatTemplate::Rendered ChatTemplate::render(std::span<const ChatMessage> messages, const ChatOptions& opt) const {
    // The built-in formats predate tool use; the model file's own template renders it.
    bool tool_use = !opt.tools.empty();
    for (const ChatMessage& m : messages) tool_use = tool_use || !m.tool_calls.empty();
    if (family_ == Family::Jinja) return render_jinja(messages, opt);
    if (tool_use)
        fail("the built-in chat template '{}' does not render tools or tool calls; serve with the model file's own "
             "template (no --chat-template)",
             name_);
    return family_ == Family::Llama3 ? render_llama3(messages, opt) : render_chatml(messages, opt);
}

ChatTemplate::Rendered ChatTemplate::render_chatml(std::span<const ChatMessage> msgs, const ChatOptions& opt) const {
    Out out;
    auto turn = [&](std::string_view role, std::string_view content, bool from_message) {
        out += "<|im_start|>";
        out += role;
        out += "\n";
        if (from_message) out.message(content);
        else out += content;
        out += "<|im_end|>\n";
    };
    if (default_system_ && (msgs.empty() || msgs[0].role != "system"))
        turn("system", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", false);

    // Qwen3: reasoning is kept only for assistant turns after the last real user query.
    size_t last_query = msgs.empty() ? 0 : msgs.size() - 1;
    for (size_t i = msgs.size(); i-- > 0;) {
        if (msgs[i].role == "user" && !is_tool_response(msgs[i])) {
            last_query = i;
            break;
        }
    }
    const bool qwen = qwen3_history_ || default_system_;
    for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        bool last = i + 1 == msgs.size();
        if (qwen && m.role == "tool") {
            if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n";
            out.message(m.content);
            out += "\n</tool_response>";
            if (last || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
        } else if (qwen3_history_ && m.role == "assistant") {
            std::string_view content = m.content, reasoning;
            if (size_t e = content.rfind("</think>"); e != content.npos) {
                std::string_view before = content.substr(0, content.find("</think>"));
                before = strip(before, "\n", false, true);
                if (size_t s = before.rfind("<think>"); s != before.npos) before.remove_prefix(s + 7);
                reasoning = strip(before, "\n", true, false);
                content = strip(content.substr(e + 8), "\n", true, false);
            }
            out += "<|im_start|>assistant\n";
            if (i > last_query && (last || !reasoning.empty())) {
                out += "<think>\n";
                out.message(strip(reasoning, "\n", true, true));
                out += "\n</think>\n\n";
                out.message(strip(content, "\n", true, false));
            } else {
                out.message(content);
            }
            out += "<|im_end|>\n";
        } else {
            turn(m.role, m.content, true);
        }
    }
    if (opt.add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        if (forced_think_) out += "<think>\n";
        else if (thinking_switch_ && !opt.enable_thinking.value_or(true)) out += "<think>\n\n</think>\n\n";
    }
    out.r.opens_think = opt.add_generation_prompt && forced_think_;
    return std::move(out.r);
}

ChatTemplate::Rendered ChatTemplate::render_llama3(std::span<const ChatMessage> msgs, const ChatOptions& opt) const {
    Out out;
    for (const ChatMessage& m : msgs) {
        out += "<|start_header_id|>";
        out += m.role;
        out += "<|end_header_id|>\n\n";
        out.message(strip(m.content, " \t\n\r", true, true));
        out += "<|eot_id|>";
    }
    if (opt.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return std::move(out.r);
}

}  // namespace strata
