// LStr: a string of the template engine, with the byte ranges of it that came from the
// caller's data ("literal" text: message contents, roles, tool JSON). The ranges follow
// the text through every operation so that the rendered prompt can say which of its
// bytes must be tokenized as plain text, never as special tokens (a user message that
// spells "<|im_end|>" must not end its turn).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::jinja {

using Range = std::pair<size_t, size_t>;  // [begin, end) in bytes

struct LStr {
    std::string text;
    std::vector<Range> literal;  // sorted, disjoint, non-empty, never adjacent

    LStr() = default;
    explicit LStr(std::string t) : text(std::move(t)) {}  // the template's own text
    static LStr from_data(std::string t);        // all of it literal

    bool any_literal() const { return !literal.empty(); }
    void append(std::string_view plain);
    void append(const LStr& s);
    // The bytes [pos, pos + n), their ranges mapped.
    LStr substr(size_t pos, size_t n) const;
    // A result computed from this text by an operation whose byte mapping we do not
    // follow: all literal when any input byte was (the safe direction).
    LStr derived(std::string result) const;
    // `result` has the same length and byte positions as this text (ASCII case changes).
    LStr same_shape(std::string result) const;
};

// UTF-8: byte offsets of each code point, plus text.size() at the end; Python indexes
// and counts strings by code point.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);

}  // namespace strata::jinja
