// OpenAI request bodies -> validated plain structs. Every field is type- and
// range-checked; a field Strata does not implement is refused (HTTP 400 naming it),
// never silently ignored.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/text/chat_template.h"

namespace strata::server {

struct ApiRequest {
    bool chat = false;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;
    std::string model;           // as given; empty when absent
    std::vector<ChatMessage> messages;   // chat
    std::string prompt_text;             // completions, text prompt
    std::vector<int32_t> prompt_tokens;  // completions, token-id prompt
    bool prompt_is_tokens = false;
    std::optional<bool> enable_thinking; // chat_template_kwargs.enable_thinking
    // Tool use: the tools offered (validated OpenAI objects), and how the model may use
    // them. none: not shown to the model, nothing parsed; auto: the model may call;
    // required / named: it must call (any tool / that one).
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // in the client's key order
    enum class ToolChoice { None, Auto, Required, Named } tool_choice = ToolChoice::Auto;
    std::string tool_choice_name;        // Named
    bool parallel_tool_calls = true;
    Request engine;                      // everything but the prompt's ids
};

// body: the raw request body. defaults: the server's sampling flags.
ApiRequest parse_chat(const std::string& body, const SamplingParams& defaults);
ApiRequest parse_completion(const std::string& body, const SamplingParams& defaults);

// Parses a JSON object body; 400 on malformed JSON or a non-object.
nlohmann::json parse_body(const std::string& body);

}  // namespace strata::server
