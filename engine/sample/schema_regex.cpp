// JSON Schema "pattern" -> grammar of a JSON string's contents.
//
// The subset: literal characters, escapes (\d \w \s \D \W \S, \n \r \t \f \v, \xHH,
// \uHHHH, an escaped punctuation character), classes [...] / [^...] with ranges and the
// shorthands, ".", groups (...) and (?:...), alternation, quantifiers * + ? {n} {n,}
// {n,m} (a lazy "?" after one changes nothing here), ^ as the pattern's first character
// and $ as its last. Anything else (backreferences, lookaround, \b, \p{..}, anchors
// elsewhere) is refused by name. The regex matches the decoded string; the grammar
// produces its JSON spelling, so '"', '\' and control characters come out escaped.
#include <cctype>
#include <charconv>

#include "engine/core/error.h"
#include "engine/sample/json_schema_parts.h"
#include "engine/text/unicode.h"

namespace strata::schema {

namespace {

constexpr int kMaxNesting = 100;
constexpr int32_t kMaxCount = 100000;

std::vector<CharRange> digit_ranges() { return {{'0', '9'}}; }
std::vector<CharRange> word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
std::vector<CharRange> space_ranges() { return {{'\t', '\r'}, {' ', ' '}}; }

}  // namespace

std::string json_escaped(uint32_t cp) {
    switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
    }
    if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
    std::string s;
    text::append_utf8(s, cp);
    return s;
}

namespace {

// The characters of `ranges` as JSON spells them: the plain ones as a class, the few
// that JSON escapes ('"', '\', controls) as their escapes.
GrammarExpr json_chars(std::vector<CharRange> ranges, bool negated) {
    const std::vector<CharRange> cps = normalized_ranges(std::move(ranges), negated);
    std::vector<CharRange> plain;
    std::vector<GrammarExpr> alts;
    for (CharRange r : cps) {
        for (uint32_t c = r.lo; c <= r.hi && c < 0x20; ++c) alts.push_back(gram::lit(json_escaped(c)));
        if (r.hi < 0x20) continue;
        const uint32_t lo = std::max<uint32_t>(r.lo, 0x20);
        for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}})
            if (lo <= special && special <= r.hi) alts.push_back(gram::lit(json_escaped(special)));
        // The range without '"' (0x22) and '\' (0x5C).
        uint32_t from = lo;
        for (uint32_t special : {uint32_t{'"'}, uint32_t{'\\'}}) {
            if (special < from || special > r.hi) continue;
            if (special > from) plain.push_back({from, special - 1});
            from = special + 1;
        }
        if (from <= r.hi) plain.push_back({from, r.hi});
    }
    if (!plain.empty()) alts.insert(alts.begin(), gram::cls(std::move(plain)));
    if (alts.empty()) fail("JSON schema: pattern has a character class that matches nothing");
    return gram::alt(std::move(alts));
}

class RegexParser {
public:
    explicit RegexParser(std::string_view p) : p_(p) {}

    GrammarExpr run(Grammar& g) {
        const bool anchored_start = !p_.empty() && p_[0] == '^';
        const bool anchored_end = p_.size() > static_cast<size_t>(anchored_start) && p_.back() == '$' &&
                                  (p_.size() < 2 || p_[p_.size() - 2] != '\\');
        if (anchored_start) ++i_;
        if (anchored_end) p_.remove_suffix(1);
        GrammarExpr body = alternation(0);
        if (i_ < p_.size()) error("unbalanced ')'");
        if (top_level_alternation_ && (anchored_start || anchored_end))
            error("anchors around a top-level '|' (write ^(a|b)$)");
        std::vector<GrammarExpr> parts;
        const GrammarExpr any = gram::star(gram::ref(primitive(g, "json-char")));
        if (!anchored_start) parts.push_back(any);
        parts.push_back(std::move(body));
        if (!anchored_end) parts.push_back(any);
        return gram::seq(std::move(parts));
    }

private:
    template <typename... Args>
    [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
        fail("JSON schema: pattern '{}' is not supported: {}", p_, fmt::format(f, std::forward<Args>(args)...));
    }

    bool more() const { return i_ < p_.size(); }

    GrammarExpr alternation(int depth) {
        if (depth > kMaxNesting) error("groups nest deeper than {}", kMaxNesting);
        std::vector<GrammarExpr> alts{concatenation(depth)};
        while (more() && p_[i_] == '|') {
            if (depth == 0) top_level_alternation_ = true;
            ++i_;
            alts.push_back(concatenation(depth));
        }
        return gram::alt(std::move(alts));
    }

    GrammarExpr concatenation(int depth) {
        std::vector<GrammarExpr> items;
        while (more() && p_[i_] != '|' && p_[i_] != ')') items.push_back(quantified(depth));
        return gram::seq(std::move(items));
    }

    GrammarExpr quantified(int depth) {
        GrammarExpr e = atom(depth);
        while (more()) {
            const char c = p_[i_];
            if (c == '*') e = gram::star(std::move(e)), ++i_;
            else if (c == '+') e = gram::plus(std::move(e)), ++i_;
            else if (c == '?') e = gram::opt(std::move(e)), ++i_;
            else if (c == '{' && i_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[i_ + 1]))) e = braces(std::move(e));
            else break;
            if (more() && p_[i_] == '?') ++i_;  // lazy: the same language
            if (more() && p_[i_] == '+') error("possessive quantifiers");
        }
        return e;
    }

    int32_t count() {
        int32_t v = 0;
        auto [end, ec] = std::from_chars(p_.data() + i_, p_.data() + p_.size(), v);
        if (ec != std::errc() || v > kMaxCount) error("a repetition count above {}", kMaxCount);
        i_ = static_cast<size_t>(end - p_.data());
        return v;
    }

    GrammarExpr braces(GrammarExpr e) {
        ++i_;
        const int32_t min = count();
        int32_t max = min;
        if (more() && p_[i_] == ',') {
            ++i_;
            max = more() && p_[i_] == '}' ? -1 : count();
        }
        if (!more() || p_[i_] != '}') error("an unterminated {{...}}");
        ++i_;
        if (max >= 0 && max < min) error("a repetition with max < min");
        return gram::rep(std::move(e), min, max);
    }

    GrammarExpr atom(int depth) {
        const char c = p_[i_];
        if (c == '(') return group(depth);
        if (c == '[') return char_class();
        if (c == '.') {
            ++i_;
            return json_chars({{'\n', '\n'}}, true);
        }
        if (c == '^' || c == '$') error("'{}' other than at the pattern's start / end", c);
        if (c == '*' || c == '+' || c == '?' || c == '{') error("a quantifier with nothing to repeat");
        if (c == '\\') {
            ++i_;
            const auto [ranges, negated] = escape();
            return json_chars(ranges, negated);
        }
        const uint32_t cp = next_char();
        return gram::lit(json_escaped(cp));
    }

    GrammarExpr group(int depth) {
        ++i_;
        if (more() && p_[i_] == '?') {
            if (p_.substr(i_, 2) != "?:") error("'(?' groups other than (?:...) (lookaround, named groups)");
            i_ += 2;
        }
        GrammarExpr e = alternation(depth + 1);
        if (!more() || p_[i_] != ')') error("an unterminated group");
        ++i_;
        return e;
    }

    uint32_t next_char() {
        try {
            return next_utf8(p_, i_);
        } catch (const Error&) {
            error("invalid UTF-8");
        }
    }

    uint32_t hex(int digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k, ++i_) {
            if (!more() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) error("a bad hex escape");
            const char h = p_[i_];
            v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return v;
    }

    // After a backslash: the code points it stands for (a class, maybe negated).
    std::pair<std::vector<CharRange>, bool> escape() {
        if (!more()) error("a trailing backslash");
        const char c = p_[i_++];
        const auto one = [](uint32_t cp) { return std::pair{std::vector<CharRange>{{cp, cp}}, false}; };
        switch (c) {
        case 'd': return {digit_ranges(), false};
        case 'D': return {digit_ranges(), true};
        case 'w': return {word_ranges(), false};
        case 'W': return {word_ranges(), true};
        case 's': return {space_ranges(), false};
        case 'S': return {space_ranges(), true};
        case 'n': return one('\n');
        case 'r': return one('\r');
        case 't': return one('\t');
        case 'f': return one('\f');
        case 'v': return one('\v');
        case 'x': return one(hex(2));
        case 'u': return one(hex(4));
        default: break;
        }
        if (std::isalnum(static_cast<unsigned char>(c))) error("the escape '\\{}'", c);
        return one(static_cast<unsigned char>(c));
    }

    GrammarExpr char_class() {
        ++i_;
        const bool negated = more() && p_[i_] == '^';
        if (negated) ++i_;
        std::vector<CharRange> ranges;
        bool first = true;
        while (true) {
            if (!more()) error("an unterminated [...]");
            if (p_[i_] == ']' && !first) break;
            first = false;
            const auto [lo_set, lo_negated] = class_member();
            const bool single = lo_set.size() == 1 && lo_set[0].lo == lo_set[0].hi && !lo_negated;
            if (single && p_.substr(i_, 1) == "-" && p_.substr(i_ + 1, 1) != "]" && i_ + 1 < p_.size()) {
                ++i_;
                const auto [hi_set, hi_negated] = class_member();
                if (hi_set.size() != 1 || hi_set[0].lo != hi_set[0].hi || hi_negated || hi_set[0].lo < lo_set[0].lo)
                    error("a bad range in [...]");
                ranges.push_back({lo_set[0].lo, hi_set[0].lo});
                continue;
            }
            const auto add = lo_negated ? normalized_ranges(lo_set, true) : lo_set;
            ranges.insert(ranges.end(), add.begin(), add.end());
        }
        ++i_;
        return json_chars(std::move(ranges), negated);
    }

    std::pair<std::vector<CharRange>, bool> class_member() {
        if (p_[i_] == '\\') {
            ++i_;
            if (more() && p_[i_] == 'b') {  // inside a class, \b is backspace
                ++i_;
                return {{{'\b', '\b'}}, false};
            }
            return escape();
        }
        if (p_.substr(i_, 2) == "[:") error("POSIX classes [:...:]");
        const uint32_t cp = next_char();
        return {{{cp, cp}}, false};
    }

    std::string_view p_;
    size_t i_ = 0;
    bool top_level_alternation_ = false;
};

}  // namespace

GrammarExpr regex_to_grammar(std::string_view pattern, Grammar& g) { return RegexParser(pattern).run(g); }

}  // namespace strata::schema
