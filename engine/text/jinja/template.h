// strata::jinja::Template: a Jinja template engine for the chat templates of model
// files (tokenizer.chat_template), rendering as Hugging Face transformers does: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, plus
// raise_exception, strftime_now and transformers' tojson. Parse once, render many.
//
// The output says which of its bytes came from the caller's data (message text, tool
// JSON...): tokenize those as plain text, the rest with special tokens, so that a
// message spelling "<|im_end|>" stays text.
//
// Not supported (a template using them fails to parse, never renders wrongly): include,
// import, extends, block, call blocks, recursive loops, `%` string formatting and
// str.format; case mapping (upper, lower, title) changes ASCII letters only.
#pragma once
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/text/jinja/interpreter.h"

namespace strata::jinja {

struct RenderOptions {
    // Variables whose text is the template's own, not the caller's: bos_token, eos_token.
    std::map<std::string, std::string> trusted;
    // The clock of strftime_now (a local time); unset: now.
    std::optional<std::tm> now;
    Limits limits;
};

class Template {
public:
    // Throws strata::Error naming the line and column of a syntax error.
    static Template parse(std::string_view source);

    struct Output {
        std::string text;
        std::vector<std::pair<size_t, size_t>> literal;  // [begin, end) byte ranges, sorted, disjoint
    };
    // `data`: a JSON object whose keys are the template's variables (messages, tools,
    // add_generation_prompt, ...); all its strings are literal. Dicts iterate (and
    // tojson prints them) in the JSON object's order: pass an ordered_json parsed from
    // the request to match HF, which keeps the request's key order (nlohmann::json
    // sorts keys). Throws strata::Error on a template error (raise_exception's
    // message, undefined use, limits), naming the template line.
    Output render(const nlohmann::ordered_json& data, const RenderOptions& opt = {}) const;
    Output render(const nlohmann::json& data, const RenderOptions& opt = {}) const;

private:
    Output render(Value data, const RenderOptions& opt) const;

    std::string source_;                // normalized: what error locations refer to
    std::shared_ptr<const Body> body_;  // immutable, so copies of a Template share it
};

}  // namespace strata::jinja
