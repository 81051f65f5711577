#include "engine/sample/tool_grammar.h"

#include "engine/core/error.h"
#include "engine/sample/json_schema.h"

namespace strata {

std::shared_ptr<const CompiledGrammar> tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& only,
                                                         ToolSyntax syntax, bool parallel) {
    using nlohmann::ordered_json;
    if (syntax == ToolSyntax::None) fail("this chat template has no tool-call syntax");
    // One schema for a whole call: {"name": <const>, "arguments": <parameters>} per tool
    // (Llama 3 names the arguments "parameters"), any of the allowed tools.
    const char* args_key = syntax == ToolSyntax::Llama3Json ? "parameters" : "arguments";
    ordered_json calls = ordered_json::array();
    for (const auto& t : tools) {
        const auto& f = t["function"];
        const std::string name = f["name"].get<std::string>();
        if (!only.empty() && name != only) continue;
        ordered_json params = f.contains("parameters") ? f["parameters"] : ordered_json{{"type", "object"}};
        ordered_json call = {{"type", "object"},
                             {"properties", {{"name", {{"const", name}}}, {args_key, std::move(params)}}},
                             {"required", {"name", args_key}},
                             {"additionalProperties", false}};
        calls.push_back(std::move(call));
    }
    if (calls.empty()) fail("no tool named '{}'", only);
    Grammar g = json_schema_to_grammar(calls.size() == 1 ? calls[0] : ordered_json{{"anyOf", calls}});
    // The schema compiler's start rule is "root"; the call syntax wraps it.
    const int32_t call = *g.find("root");
    const int32_t wrapped = g.rule("tool-call");
    if (syntax == ToolSyntax::Llama3Json) {
        g.define(wrapped, gram::ref(call));
    } else {
        GrammarExpr one = gram::seq({gram::lit("<tool_call>\n"), gram::ref(call), gram::lit("\n</tool_call>")});
        g.define(wrapped, parallel ? gram::seq({one, gram::star(gram::seq({gram::lit("\n"), one}))}) : one);
    }
    return CompiledGrammar::compile(g, "tool-call");
}

}  // namespace strata
