// The text form of a grammar (grammar.h), parsed by recursive descent.
#include <cctype>
#include <charconv>

#include "engine/core/error.h"
#include "engine/sample/grammar.h"
#include "engine/text/unicode.h"

namespace strata {

namespace {

// Parentheses nest at most this deep: the parser recurses on them.
constexpr int kMaxNesting = 100;
// A repetition count beyond this is refused (the compiled grammar unrolls counts).
constexpr int32_t kMaxCount = 100000;

class Parser {
public:
    explicit Parser(std::string_view text) : s_(text) {}

    Grammar run() {
        skip_space();
        while (i_ < s_.size()) {
            const std::string name = parse_name();
            skip_space();
            expect("::=");
            const int32_t id = g_.rule(name);
            if (g_.body(id)) error("rule '{}' is defined twice", name);
            g_.define(id, parse_alternatives(0));
            if (i_ < s_.size() && !at_rule_start()) error("unexpected '{}'", s_[i_]);
        }
        for (int32_t r = 0; r < g_.size(); ++r)
            if (!g_.body(r)) fail("grammar: rule '{}' is used but not defined", g_.name(r));
        return std::move(g_);
    }

private:
    template <typename... Args>
    [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
        size_t line = 1, col = 1;
        for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
            if (s_[k] == '\n') ++line, col = 1;
            else ++col;
        }
        fail("grammar: {} at line {}, column {}", fmt::format(f, std::forward<Args>(args)...), line, col);
    }

    void skip_space() {
        while (i_ < s_.size()) {
            if (s_[i_] == '#') {
                while (i_ < s_.size() && s_[i_] != '\n') ++i_;
            } else if (std::isspace(static_cast<unsigned char>(s_[i_]))) {
                ++i_;
            } else {
                return;
            }
        }
    }

    static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

    bool peek(std::string_view tok) const { return s_.substr(i_, tok.size()) == tok; }

    void expect(std::string_view tok) {
        if (!peek(tok)) error("expected '{}'", tok);
        i_ += tok.size();
    }

    std::string parse_name() {
        const size_t start = i_;
        while (i_ < s_.size() && name_char(s_[i_])) ++i_;
        if (i_ == start) error("expected a rule name");
        return std::string(s_.substr(start, i_ - start));
    }

    // A name followed by "::=" starts the next rule and ends the current body.
    bool at_rule_start() const {
        size_t k = i_;
        while (k < s_.size() && name_char(s_[k])) ++k;
        if (k == i_) return false;
        while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
        return s_.substr(k, 3) == "::=";
    }

    GrammarExpr parse_alternatives(int depth) {
        if (depth > kMaxNesting) error("parentheses nest deeper than {}", kMaxNesting);
        std::vector<GrammarExpr> alts;
        alts.push_back(parse_sequence(depth));
        while (i_ < s_.size() && s_[i_] == '|') {
            ++i_;
            alts.push_back(parse_sequence(depth));
        }
        return gram::alt(std::move(alts));
    }

    GrammarExpr parse_sequence(int depth) {
        std::vector<GrammarExpr> items;
        for (skip_space(); i_ < s_.size() && s_[i_] != '|' && s_[i_] != ')' && !at_rule_start(); skip_space())
            items.push_back(parse_quantified(depth));
        return gram::seq(std::move(items));
    }

    GrammarExpr parse_quantified(int depth) {
        GrammarExpr e = parse_atom(depth);
        while (i_ < s_.size()) {
            const char c = s_[i_];
            if (c == '*') e = gram::star(std::move(e)), ++i_;
            else if (c == '+') e = gram::plus(std::move(e)), ++i_;
            else if (c == '?') e = gram::opt(std::move(e)), ++i_;
            else if (c == '{') e = parse_braces(std::move(e));
            else break;
        }
        return e;
    }

    GrammarExpr parse_braces(GrammarExpr e) {
        ++i_;  // '{'
        const int32_t min = parse_count();
        int32_t max = min;
        if (peek(",")) {
            ++i_;
            max = peek("}") ? -1 : parse_count();
        }
        expect("}");
        if (max >= 0 && max < min) error("repetition {{{},{}}} has max < min", min, max);
        return gram::rep(std::move(e), min, max);
    }

    int32_t parse_count() {
        int32_t v = 0;
        auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
        if (ec != std::errc() || v > kMaxCount) error("expected a count in [0, {}]", kMaxCount);
        i_ = static_cast<size_t>(end - s_.data());
        return v;
    }

    GrammarExpr parse_atom(int depth) {
        const char c = s_[i_];
        if (c == '"') return parse_literal();
        if (c == '[') return parse_class();
        if (c == '.') {
            ++i_;
            return gram::cls({}, true);
        }
        if (c == '(') {
            ++i_;
            GrammarExpr e = parse_alternatives(depth + 1);
            skip_space();
            expect(")");
            return e;
        }
        if (name_char(c)) return gram::ref(g_.rule(parse_name()));
        error("unexpected '{}'", c);
    }

    uint32_t parse_hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k, ++i_) {
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) error("expected {} hex digits", digits);
            const char h = s_[i_];
            v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) error("U+{:X} is not a character", v);
        return v;
    }

    // After a backslash: the escaped code point.
    uint32_t parse_escape() {
        if (i_ >= s_.size()) error("unfinished escape");
        const char c = s_[i_++];
        switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(c);
        default: --i_; error("unknown escape '\\{}'", c);
        }
    }

    // One character of a literal or class: an escape, or a UTF-8 code point.
    uint32_t parse_char() {
        if (s_[i_] == '\\') {
            ++i_;
            return parse_escape();
        }
        try {
            return next_utf8(s_, i_);
        } catch (const Error&) {
            error("invalid UTF-8");
        }
    }

    GrammarExpr parse_literal() {
        ++i_;  // '"'
        std::string bytes;
        while (true) {
            if (i_ >= s_.size()) error("unterminated string");
            if (s_[i_] == '"') break;
            text::append_utf8(bytes, parse_char());
        }
        ++i_;
        return gram::lit(bytes);
    }

    GrammarExpr parse_class() {
        ++i_;  // '['
        const bool negated = peek("^");
        if (negated) ++i_;
        std::vector<CharRange> ranges;
        while (true) {
            if (i_ >= s_.size()) error("unterminated character class");
            if (s_[i_] == ']') break;
            const uint32_t lo = parse_char();
            uint32_t hi = lo;
            if (peek("-") && s_.substr(i_ + 1, 1) != "]") {
                ++i_;
                if (i_ >= s_.size()) error("unterminated character class");
                hi = parse_char();
                if (hi < lo) error("character range is backwards");
            }
            ranges.push_back({lo, hi});
        }
        ++i_;
        return gram::cls(std::move(ranges), negated);
    }

    std::string_view s_;
    size_t i_ = 0;
    Grammar g_;
};

}  // namespace

Grammar Grammar::parse(std::string_view text) { return Parser(text).run(); }

}  // namespace strata
