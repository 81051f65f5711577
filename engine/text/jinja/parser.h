// The parser: tokens to the syntax tree, with jinja2's grammar and precedence (lowest
// first): `a if c else b`, or, and, not, comparisons and `in` (chained as in Python),
// + -, ~, * / // %, **, unary - +, then postfix . [] () and | filter / is test.
#pragma once
#include <string_view>

#include "engine/text/jinja/ast.h"

namespace strata::jinja {

// `source` as normalize_source gives it. Throws strata::Error naming line and column.
Body parse_template(std::string_view source);

}  // namespace strata::jinja
