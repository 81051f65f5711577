// Tool calls in a model's output, as its chat template taught it to write them, turned
// into OpenAI-style calls while the text streams. Two syntaxes cover the templates we
// serve:
//   Hermes / Qwen: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, any
//     number of them, with text around them;
//   Llama 3.x JSON: the whole answer is {"name": "f", "parameters": {...}} (optionally
//     after <|python_tag|>), or several such objects separated by ';'.
// A block that does not parse as a call is given back as text, never dropped.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // the arguments object as JSON text
};

enum class ToolSyntax { None, Hermes, Llama3Json };

// The syntax a chat template's text asks for (None when it mentions no tool calls).
ToolSyntax tool_syntax_of_template(std::string_view jinja);
const char* tool_syntax_name(ToolSyntax s);

class ToolCallParser {
public:
    // max_calls: 1 when the request set parallel_tool_calls false (later calls dropped).
    // id_prefix: calls are named id_prefix + "0", "1", ...
    ToolCallParser(ToolSyntax syntax, std::string id_prefix, size_t max_calls = SIZE_MAX);

    struct Out {
        std::string content;          // text to show now
        std::vector<ToolCall> calls;  // calls completed now
    };
    // Text as it streams; text that may still become part of a call is held back.
    Out push(std::string_view text);
    // End of the answer: what is held back becomes a call or text.
    Out flush();

    size_t n_calls() const { return n_calls_; }

private:
    Out hermes(bool final);
    Out llama3(bool final);
    bool take(std::string_view name, std::string_view args, Out& out);

    ToolSyntax syntax_;
    std::string prefix_;
    size_t max_calls_;
    size_t n_calls_ = 0;
    std::string held_;
    bool started_ = false;   // llama3: the answer has begun (leading whitespace seen past)
    bool json_mode_ = false; // llama3: the answer began as a call; held to the end
};

// One call's JSON object {"name": ..., "arguments" | "parameters": {...}} -> (name,
// arguments as JSON text); false when it is not one.
bool parse_tool_call_json(std::string_view text, std::string& name, std::string& arguments);

}  // namespace strata
