// JSON schema -> grammar, for response_format {"type": "json_schema"} (and the fixed
// grammar of {"type": "json_object"}).
//
// Supported: type (one or a list), enum, const, properties, required,
// additionalProperties (false / true / a schema), items, prefixItems, minItems,
// maxItems, anyOf, oneOf (compiled as anyOf: a value matching several branches is not
// refused), allOf (merged into one schema: properties united, required united; a keyword
// in two members with different values is refused), $ref to "#" / "#/$defs/..." /
// "#/definitions/..." (recursion allowed), $defs / definitions, string minLength /
// maxLength / pattern (the regex subset of schema_regex.h) / format (date, time,
// date-time, uuid, email, ipv4), integer minimum / maximum / exclusiveMinimum /
// exclusiveMaximum. Annotations (title, description, default, examples, $schema, $id,
// $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword, a keyword
// that does not apply to the schema's types, or a combination not listed is an Error
// naming it: never silently ignored.
//
// The grammar produces a subset of the documents the schema accepts:
//  - properties come in the order of "properties"; every required one appears, each
//    optional one may be left out (OpenAI strict mode: all required, additionalProperties
//    false, is the special case with no choice);
//  - additionalProperties absent, with "properties" present, means no other keys (as
//    llama.cpp does: the model is not offered keys the schema never names); with no
//    "properties" an object may have any keys. Extra keys, when allowed, come after the
//    named ones and never repeat a named one (unless spelled with \u escapes);
//  - whitespace: none before the root value or after it; after "{", "[", ":" and ","
//    and before "}" and "]", nothing, one space, or a newline and up to 20 spaces or
//    tabs. Bounded, so a model cannot spin on whitespace;
//  - formats check the shape (a date may be 2024-02-31);
//  - string lengths count characters, an escape as one (a surrogate pair as two).
#pragma once
#include <nlohmann/json.hpp>

#include "engine/sample/grammar.h"

namespace strata {

// Throws strata::Error naming the keyword or construct it does not support.
// nlohmann::json keeps object keys sorted, so "properties" then come in alphabetical
// order; parse the schema as nlohmann::ordered_json to keep the order written.
Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema);
Grammar json_schema_to_grammar(const nlohmann::json& schema);
// Any JSON object (response_format json_object), whitespace as above.
Grammar json_object_grammar();

}  // namespace strata
