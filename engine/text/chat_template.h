// Chat formatting: the model file's own tokenizer.chat_template rendered by Strata's
// Jinja engine (engine/text/jinja), or, by name (--chat-template) or when the file's
// template cannot be rendered, one of the built-in families re-implemented in C++
// (MODEL_SPEC 7.5, 7.6).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"

namespace strata {

struct ChatMessage {
    ChatMessage() = default;
    ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}

    std::string role;  // "system", "user", "assistant", "tool"
    std::string content;
    std::string reasoning_content;     // assistant: its reasoning, when the client sends it back
    std::vector<ToolCall> tool_calls;  // assistant: the calls it made
    std::string tool_call_id;          // tool: the call this is the result of
    std::string name;                  // optional participant / tool name
};

struct ChatOptions {
    bool add_generation_prompt = true;
    // Qwen3 hybrid models: false appends the empty <think>\n\n</think>\n\n block to
    // the generation prompt so the model answers without reasoning. Unset: the
    // template's default (a Jinja template sees no enable_thinking variable).
    std::optional<bool> enable_thinking;
    // OpenAI "tools" (an array of {"type": "function", "function": {...}}); empty: none.
    // Ordered as the client wrote it: templates print each tool with tojson, and Hugging
    // Face's renderer keeps the request's key order.
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
};

class ChatTemplate {
public:
    enum class Family { ChatMl, Llama3, Jinja };

    // By name: chatml, qwen2.5, qwen3, qwen3-instruct, qwen3-thinking, llama3.
    static ChatTemplate from_name(std::string_view name);
    // A built-in family recognised from tokenizer.chat_template's text; throws
    // strata::Error when not recognised.
    static ChatTemplate detect(std::string_view jinja);
    // The template itself, rendered by the Jinja engine. bos / eos: the tokenizer's
    // texts of those tokens (the template's bos_token, eos_token); strip_bos: the
    // caller adds BOS itself, so a leading bos_token the template prints is dropped.
    // Throws strata::Error when the template does not parse or cannot render a plain
    // conversation.
    static ChatTemplate from_jinja(std::string_view source, std::string bos, std::string eos, bool strip_bos);
    // What a server or CLI uses without --chat-template: from_jinja, and when that
    // fails, detect() with a warning naming why (error when neither works).
    static ChatTemplate for_model(std::string_view source, std::string bos, std::string eos, bool strip_bos);
    // for_model with the tokenizer's template, BOS and EOS.
    static ChatTemplate for_tokenizer(const Tokenizer& tok);
    static const std::vector<std::string_view>& names();

    // The prompt text and where the messages' own text lies in it. No BOS: the caller
    // adds it when Tokenizer::add_bos(). Encode with parse_special and the literal
    // ranges, so that the template's markers are special tokens and a message that
    // spells one ("<|im_end|>") stays text.
    struct Rendered {
        std::string text;
        std::vector<std::pair<size_t, size_t>> literal;  // [begin, end) byte ranges, sorted
        bool opens_think = false;  // the generation prompt ends inside <think>: the answer starts in it
    };
    Rendered render(std::span<const ChatMessage> messages, const ChatOptions& opt = {}) const;
    // The text alone (for showing; not for encoding with parse_special).
    std::string apply(std::span<const ChatMessage> messages, const ChatOptions& opt = {}) const {
        return render(messages, opt).text;
    }

    const std::string& name() const { return name_; }
    Family family() const { return family_; }
    // Qwen3-style reasoning: the answer may hold a <think>...</think> block ...
    bool uses_thinking() const { return thinking_switch_ || forced_think_; }


private:
    ChatTemplate() = default;
    Rendered render_chatml(std::span<const ChatMessage> messages, const ChatOptions& opt) const;
    Rendered render_llama3(std::span<const ChatMessage> messages, const ChatOptions& opt) const;
    Rendered render_jinja(std::span<const ChatMessage> messages, const ChatOptions& opt) const;  // chat_jinja.cpp
    struct JinjaState;
    std::shared_ptr<const JinjaState> jinja_;  // Family::Jinja: the parsed template and its tokens

    std::string name_;
    Family family_ = Family::ChatMl;
    // ChatML variants (flags rather than one class per model: they differ in little).
    bool thinking_switch_ = false;   // honours enable_thinking (Qwen3 hybrid)
    bool forced_think_ = false;      // generation prompt ends with "<think>\n"
    bool qwen3_history_ = false;     // reasoning handling of assistant turns (Qwen3)
    bool default_system_ = false;    // Qwen2.5's default system prompt
};

}  // namespace strata
