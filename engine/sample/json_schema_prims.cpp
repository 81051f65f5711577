// The JSON prelude (primitive rules as grammar text) and integer ranges as grammars.
#include <algorithm>
#include <string>

#include "engine/core/error.h"
#include "engine/sample/json_schema_parts.h"

namespace strata::schema {

namespace {

// Escapes: \uXXXX only for a scalar value or a surrogate pair, so every string the
// grammar allows decodes to valid UTF-8. Numbers have at most 18 integer digits, 16
// fraction digits and a 2-digit exponent: every integer fits an int64 and every number
// a double (parsers refuse or round beyond), and a model cannot spin on digits.
constexpr std::string_view kPrelude = R"(
ws ::= "" | " " | "\n" [ \t]{0,20}
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" (json-member ("," json-member)*)? ws "}"
json-member ::= ws json-string ":" ws json-value
json-array ::= "[" (ws json-value ("," ws json-value)*)? ws "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" json-escape
json-escape ::= ["\\/bfnrt] | "u" json-bmp | "u" [dD] [89abAB] json-hex json-hex "\\u" [dD] [c-fC-F] json-hex json-hex
json-bmp ::= [0-9a-cA-CeEfF] json-hex json-hex json-hex | [dD] [0-7] json-hex json-hex
json-hex ::= [0-9a-fA-F]
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
json-boolean ::= "true" | "false"
json-null ::= "null"
date ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
date-time ::= date "T" time
uuid ::= json-hex{8} "-" json-hex{4} "-" json-hex{4} "-" json-hex{4} "-" json-hex{12}
email ::= [a-zA-Z0-9_%+-]+ ("." [a-zA-Z0-9_%+-]+)* "@" [a-zA-Z0-9-]+ ("." [a-zA-Z0-9-]+)+
ipv4 ::= ipv4-octet "." ipv4-octet "." ipv4-octet "." ipv4-octet
ipv4-octet ::= "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9]? [0-9]
)";

constexpr std::string_view kFormats[] = {"date", "time", "date-time", "uuid", "email", "ipv4"};

const Grammar& prelude() {
    static const Grammar g = Grammar::parse(kPrelude);
    return g;
}

GrammarExpr remap(const GrammarExpr& e, Grammar& into, const Grammar& from);

// A rule already declared in `into` is returned as is: that ends the recursion of
// recursive rules (json-value), and schema rules never take prelude names.
int32_t import(Grammar& into, const Grammar& from, int32_t rule) {
    const std::string& name = from.name(rule);
    if (auto have = into.find(name)) return *have;
    const int32_t id = into.rule(name);
    into.define(id, remap(*from.body(rule), into, from));
    return id;
}

GrammarExpr remap(const GrammarExpr& e, Grammar& into, const Grammar& from) {
    GrammarExpr out = e;
    if (e.kind == GrammarExpr::Kind::Ref) out.rule = import(into, from, e.rule);
    for (size_t i = 0; i < e.items.size(); ++i) out.items[i] = remap(e.items[i], into, from);
    return out;
}

std::string digits_of(uint64_t v) { return std::to_string(v); }

// Strings of exactly lo.size() digits (leading zeros included) from lo to hi.
GrammarExpr same_width(std::string_view lo, std::string_view hi) {
    if (lo.empty()) return gram::seq({});
    const auto digit = [](char a, char b) { return gram::cls({{static_cast<uint32_t>(a), static_cast<uint32_t>(b)}}); };
    const size_t rest = lo.size() - 1;
    if (rest == 0) return digit(lo[0], hi[0]);
    const bool full_rest = lo.substr(1) == std::string(rest, '0') && hi.substr(1) == std::string(rest, '9');
    if (full_rest) return gram::seq({digit(lo[0], hi[0]), gram::rep(digit('0', '9'), static_cast<int32_t>(rest), static_cast<int32_t>(rest))});
    if (lo[0] == hi[0]) return gram::seq({gram::lit(lo.substr(0, 1)), same_width(lo.substr(1), hi.substr(1))});
    std::vector<GrammarExpr> alts;
    alts.push_back(gram::seq({gram::lit(lo.substr(0, 1)), same_width(lo.substr(1), std::string(rest, '9'))}));
    if (hi[0] - lo[0] >= 2)
        alts.push_back(gram::seq({digit(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)),
                                  gram::rep(digit('0', '9'), static_cast<int32_t>(rest), static_cast<int32_t>(rest))}));
    alts.push_back(gram::seq({gram::lit(hi.substr(0, 1)), same_width(std::string(rest, '0'), hi.substr(1))}));
    return gram::alt(std::move(alts));
}

uint64_t pow10(size_t n) {
    uint64_t p = 1;
    while (n--) p *= 10;
    return p;
}

// Non-negative integers in [lo, hi], one alternative per length.
GrammarExpr non_negative(uint64_t lo, uint64_t hi) {
    std::vector<GrammarExpr> alts;
    for (size_t len = digits_of(lo).size(); len <= digits_of(hi).size(); ++len) {
        const uint64_t a = std::max(lo, len == 1 ? 0 : pow10(len - 1));
        const uint64_t b = std::min(hi, pow10(len) - 1);
        if (a <= b) alts.push_back(same_width(digits_of(a), digits_of(b)));
    }
    return gram::alt(std::move(alts));
}

}  // namespace

int32_t primitive(Grammar& g, std::string_view name) {
    const auto rule = prelude().find(name);
    STRATA_CHECK(rule.has_value(), "no prelude rule '{}'", name);
    return import(g, prelude(), *rule);
}

bool is_supported_format(std::string_view format) {
    return std::find(std::begin(kFormats), std::end(kFormats), format) != std::end(kFormats);
}

GrammarExpr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    constexpr int64_t kLimit = 1'000'000'000'000'000'000;
    if ((lo && (*lo < -kLimit || *lo > kLimit)) || (hi && (*hi < -kLimit || *hi > kLimit)))
        fail("JSON schema: integer bounds beyond +-1e18 are not supported");
    if (lo && hi && *lo > *hi) fail("JSON schema: minimum {} is above maximum {}", *lo, *hi);
    // An open side stops at 18 digits, as json-integer does.
    constexpr uint64_t kOpen = 999'999'999'999'999'999;
    std::vector<GrammarExpr> alts;
    if (!lo || *lo < 0) {  // negative numbers: "-" and a magnitude in [max(1, -hi), -lo]
        const uint64_t mag_lo = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
        const uint64_t mag_hi = lo ? static_cast<uint64_t>(-*lo) : std::max(mag_lo, kOpen);
        alts.push_back(gram::seq({gram::lit("-"), non_negative(mag_lo, mag_hi)}));
    }
    if (!hi || *hi >= 0) {
        const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
        alts.push_back(non_negative(from, hi ? static_cast<uint64_t>(*hi) : std::max(from, kOpen)));
    }
    return gram::alt(std::move(alts));
}

}  // namespace strata::schema
