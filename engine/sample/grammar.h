// Context-free grammars over UTF-8 text, for constrained decoding (structured output).
//
// A grammar is a list of named rules; each rule's body is an expression of literals,
// character classes (code point ranges, possibly negated), references to rules,
// sequences, alternatives and repetitions {m,n}. The matcher (grammar_matcher.h) runs
// the compiled, byte-level form of it (compiled_grammar.h).
//
// The text form is GBNF-like:
//
//   root   ::= "{" ws pair ("," ws pair)* "}"    # comments run to the end of the line
//   pair   ::= key ":" ws [0-9]+
//   key    ::= "\"" [a-z_]{1,16} "\""
//   ws     ::= [ \t\n]{0,4}
//
// Literals are "..." with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes (HH is a code
// point, written as UTF-8); classes are [...] or [^...] with ranges a-z and the same
// escapes; "." is any code point; quantifiers are * + ? {m} {m,} {m,n}. A rule's body may
// span lines: it ends where the next "name ::=" begins. The start rule is "root".
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata {

struct CharRange {
    uint32_t lo, hi;  // code points, inclusive
    bool operator==(const CharRange&) const = default;
};

struct GrammarExpr {
    enum class Kind : uint8_t { Literal, Class, Ref, Seq, Alt, Repeat };
    Kind kind = Kind::Seq;            // an empty Seq matches the empty string
    std::string literal;              // Literal: UTF-8 bytes
    std::vector<CharRange> ranges;    // Class
    bool negated = false;             // Class: any code point outside the ranges
    int32_t rule = -1;                // Ref: the rule's id in its Grammar
    std::vector<GrammarExpr> items;   // Seq, Alt: the parts; Repeat: the one repeated
    int32_t min = 0, max = 0;         // Repeat; max < 0: unbounded

    bool operator==(const GrammarExpr&) const = default;
};

// Builders of expressions (the schema compiler writes grammars with these).
namespace gram {
GrammarExpr lit(std::string_view bytes);
GrammarExpr cls(std::vector<CharRange> ranges, bool negated = false);
GrammarExpr ref(int32_t rule);
GrammarExpr seq(std::vector<GrammarExpr> items);
GrammarExpr alt(std::vector<GrammarExpr> items);
GrammarExpr rep(GrammarExpr e, int32_t min, int32_t max);  // max < 0: unbounded
inline GrammarExpr opt(GrammarExpr e) { return rep(std::move(e), 0, 1); }
inline GrammarExpr star(GrammarExpr e) { return rep(std::move(e), 0, -1); }
inline GrammarExpr plus(GrammarExpr e) { return rep(std::move(e), 1, -1); }
}  // namespace gram

class Grammar {
public:
    // Parses the text form; throws strata::Error naming the line and column.
    static Grammar parse(std::string_view text);

    // The id of the rule called `name`, declaring it (without a body) when new, so
    // rules can refer to each other before they are defined.
    int32_t rule(std::string_view name);
    // Gives a declared rule its body; a rule is defined once.
    void define(int32_t rule, GrammarExpr body);
    int32_t add(std::string_view name, GrammarExpr body);
    std::optional<int32_t> find(std::string_view name) const;

    int32_t size() const { return static_cast<int32_t>(rules_.size()); }
    const std::string& name(int32_t rule) const;
    const GrammarExpr* body(int32_t rule) const;  // null while only declared

    // The text form, one rule a line; parse(to_text()) gives back an equal grammar.
    std::string to_text() const;

private:
    struct Rule {
        std::string name;
        std::optional<GrammarExpr> body;
    };
    std::vector<Rule> rules_;
    std::unordered_map<std::string, int32_t> index_;
};

// The code points of a class as sorted, disjoint, non-adjacent ranges: negation applied,
// clipped to U+10FFFF, surrogates removed.
std::vector<CharRange> normalized_ranges(std::vector<CharRange> ranges, bool negated);
// Decodes the code point at s[i], advancing i; throws strata::Error on invalid UTF-8.
uint32_t next_utf8(std::string_view s, size_t& i);

}  // namespace strata
