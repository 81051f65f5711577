// The pieces json_schema.cpp builds grammars from (internal to engine/sample).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/sample/grammar.h"

namespace strata::schema {

// The rule `name` of the JSON prelude (ws, json-value, json-object, json-array,
// json-string, json-char, json-number, json-integer, json-boolean, json-null, and the
// string formats date, time, date-time, uuid, email, ipv4), copied into g with the
// rules it uses unless g has it already; returns its id in g.
int32_t primitive(Grammar& g, std::string_view name);
bool is_supported_format(std::string_view format);

// Decimal integers in [lo, hi] (absent: open on that side, up to 18 digits), without
// leading zeros or "-0". Bounds must lie within +-1e18.
GrammarExpr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The JSON spelling of one code point inside a string ('"' -> \", newline -> \n, ...).
std::string json_escaped(uint32_t cp);

// The contents of a JSON string (between the quotes, escapes where JSON needs them)
// that match the regex `pattern` as JSON Schema reads it (unanchored unless ^ / $).
// Throws strata::Error naming what the supported subset lacks.
GrammarExpr regex_to_grammar(std::string_view pattern, Grammar& g);

}  // namespace strata::schema
