// The grammar of a forced tool call (tool_choice "required" or a named function): the
// model's own call syntax (engine/text/tool_calls.h) around a JSON object whose "name"
// is one of the offered tools and whose arguments follow that tool's parameter schema.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "engine/sample/compiled_grammar.h"
#include "engine/text/tool_calls.h"

namespace strata {

// tools: OpenAI tool objects; only: the one tool allowed (empty: any of them);
// parallel: one or more calls (Hermes syntax), else exactly one. Throws strata::Error
// for a parameter schema the schema compiler refuses, or a syntax without a call format.
std::shared_ptr<const CompiledGrammar> tool_call_grammar(const nlohmann::ordered_json& tools, const std::string& only,
                                                         ToolSyntax syntax, bool parallel);

}  // namespace strata
