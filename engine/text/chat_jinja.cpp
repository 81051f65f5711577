// ChatTemplate's Jinja family: the model file's own template, rendered with the context
// Hugging Face's apply_chat_template gives it (messages, tools, add_generation_prompt,
// the template kwargs, bos_token / eos_token).
#include <spdlog/spdlog.h>

#include "engine/core/error.h"
#include "engine/text/chat_template.h"
#include "engine/text/jinja/template.h"

namespace strata {

struct ChatTemplate::JinjaState {
    jinja::Template tmpl;
    std::string bos, eos;
    bool strip_bos = false;
};

namespace {

using ojson = nlohmann::ordered_json;

// A message as OpenAI clients send it; tool-call arguments as an object when they parse
// (templates print them with tojson, or test `is string`), else the text as sent.
ojson message_json(const ChatMessage& m) {
    ojson j = {{"role", m.role}, {"content", m.content}};
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& c : m.tool_calls) {
            ojson args = ojson::parse(c.arguments, nullptr, false);
            if (args.is_discarded()) args = c.arguments;
            ojson call = {{"type", "function"}, {"function", {{"name", c.name}, {"arguments", std::move(args)}}}};
            if (!c.id.empty()) call["id"] = c.id;
            calls.push_back(std::move(call));
        }
        j["tool_calls"] = std::move(calls);
    }
    return j;
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(std::string_view source, std::string bos, std::string eos, bool strip_bos) {
    ChatTemplate t;
    t.name_ = "jinja";
    t.family_ = Family::Jinja;
    t.jinja_ = std::make_shared<const JinjaState>(JinjaState{jinja::Template::parse(source), std::move(bos),
                                                             std::move(eos), strip_bos});
    // Reasoning: the template knows <think> blocks. Rendering a plain conversation is
    // also the check that the template works before any request depends on it.
    const ChatMessage probe{"user", "Hi"};
    t.render(std::span<const ChatMessage>(&probe, 1), {});
    t.thinking_switch_ = source.find("<think>") != source.npos;
    return t;
}

ChatTemplate ChatTemplate::for_model(std::string_view source, std::string bos, std::string eos, bool strip_bos) {
    if (source.empty())
        fail("the model file has no chat template; choose one with --chat-template NAME: chatml, qwen3, llama3, ...");
    try {
        return from_jinja(source, std::move(bos), std::move(eos), strip_bos);
    } catch (const Error& e) {
        ChatTemplate t = detect(source);  // throws when no built-in one fits either
        spdlog::warn("the model's chat template cannot be rendered ({}); using the built-in '{}' instead", e.what(),
                     t.name());
        return t;
    }
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tok) {
    const auto text = [&](int32_t id) { return id >= 0 && id < tok.n_vocab() ? tok.token_text(id) : std::string(); };
    return for_model(tok.chat_template(), text(tok.bos()), text(tok.eos()), tok.add_bos());
}

ChatTemplate::Rendered ChatTemplate::render_jinja(std::span<const ChatMessage> messages, const ChatOptions& opt) const {
    ojson data = {{"messages", ojson::array()}, {"add_generation_prompt", opt.add_generation_prompt}};
    for (const ChatMessage& m : messages) data["messages"].push_back(message_json(m));
    if (!opt.tools.empty()) data["tools"] = opt.tools;
    if (opt.enable_thinking) data["enable_thinking"] = *opt.enable_thinking;
    jinja::RenderOptions ro;
    ro.trusted = {{"bos_token", jinja_->bos}, {"eos_token", jinja_->eos}};
    jinja::Template::Output out = jinja_->tmpl.render(data, ro);
    Rendered r{std::move(out.text), std::move(out.literal)};
    // The caller adds BOS as the tokenizer asks; a template that prints it too would
    // double it.
    const std::string& bos = jinja_->bos;
    if (jinja_->strip_bos && !bos.empty() && r.text.starts_with(bos) &&
        (r.literal.empty() || r.literal.front().first >= bos.size())) {
        r.text.erase(0, bos.size());
        for (auto& [b, e] : r.literal) b -= bos.size(), e -= bos.size();
    }
    r.opens_think = opt.add_generation_prompt && (r.text.ends_with("<think>\n") || r.text.ends_with("<think>"));
    return r;
}

}  // namespace strata
