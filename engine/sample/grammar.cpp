#include "engine/sample/grammar.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata {

namespace gram {

GrammarExpr lit(std::string_view bytes) {
    GrammarExpr e;
    if (bytes.empty()) return e;  // the empty sequence: one spelling of "nothing"
    e.kind = GrammarExpr::Kind::Literal;
    e.literal = bytes;
    return e;
}

GrammarExpr cls(std::vector<CharRange> ranges, bool negated) {
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::Class;
    e.ranges = std::move(ranges);
    e.negated = negated;
    return e;
}

GrammarExpr ref(int32_t rule) {
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::Ref;
    e.rule = rule;
    return e;
}

// Sequences and alternatives of one item are that item, so that a grammar printed and
// parsed again is equal to the one built.
GrammarExpr seq(std::vector<GrammarExpr> items) {
    if (items.size() == 1) return std::move(items[0]);
    GrammarExpr e;
    e.items = std::move(items);
    return e;
}

GrammarExpr alt(std::vector<GrammarExpr> items) {
    if (items.size() == 1) return std::move(items[0]);
    STRATA_CHECK(!items.empty(), "an alternative needs at least one choice");
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::Alt;
    e.items = std::move(items);
    return e;
}

GrammarExpr rep(GrammarExpr item, int32_t min, int32_t max) {
    if (min < 0 || (max >= 0 && max < min)) fail("grammar: bad repetition {{{},{}}}", min, max);
    GrammarExpr e;
    e.kind = GrammarExpr::Kind::Repeat;
    e.items.push_back(std::move(item));
    e.min = min;
    e.max = max;
    return e;
}

}  // namespace gram

namespace {

bool valid_rule_name(std::string_view name) {
    if (name.empty()) return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
    return true;
}

void print_literal(std::string& out, std::string_view bytes) {
    out += '"';
    for (unsigned char c : bytes) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02X}", c);
        } else {
            out += static_cast<char>(c);  // bytes >= 0x80 raw: \xHH would mean a code point
        }
    }
    out += '"';
}

void print_class_char(std::string& out, uint32_t cp) {
    if (cp == ']' || cp == '\\' || cp == '^' || cp == '-') {
        out += '\\';
        out += static_cast<char>(cp);
    } else if (cp >= 0x21 && cp < 0x7f) {
        out += static_cast<char>(cp);
    } else if (cp <= 0xff) {
        out += fmt::format("\\x{:02X}", cp);
    } else if (cp <= 0xffff) {
        out += fmt::format("\\u{:04X}", cp);
    } else {
        out += fmt::format("\\U{:08X}", cp);
    }
}

void print_expr(std::string& out, const Grammar& g, const GrammarExpr& e, bool nested);

void print_quantifier(std::string& out, int32_t min, int32_t max) {
    if (min == 0 && max == 1) out += '?';
    else if (min == 0 && max < 0) out += '*';
    else if (min == 1 && max < 0) out += '+';
    else if (min == max) out += fmt::format("{{{}}}", min);
    else if (max < 0) out += fmt::format("{{{},}}", min);
    else out += fmt::format("{{{},{}}}", min, max);
}

// nested: e sits inside a sequence, alternative or repetition, so a sequence or
// alternative of several items needs parentheses.
void print_expr(std::string& out, const Grammar& g, const GrammarExpr& e, bool nested) {
    using K = GrammarExpr::Kind;
    switch (e.kind) {
    case K::Literal: print_literal(out, e.literal); return;
    case K::Ref: out += g.name(e.rule); return;
    case K::Class:
        out += e.negated ? "[^" : "[";
        for (const CharRange& r : e.ranges) {
            print_class_char(out, r.lo);
            if (r.hi != r.lo) {
                out += '-';
                print_class_char(out, r.hi);
            }
        }
        out += ']';
        return;
    case K::Repeat: {
        const GrammarExpr& item = e.items[0];
        const bool group = item.kind == K::Repeat || ((item.kind == K::Seq || item.kind == K::Alt) && !item.items.empty());
        if (group) out += '(';
        print_expr(out, g, item, false);
        if (group) out += ')';
        print_quantifier(out, e.min, e.max);
        return;
    }
    case K::Seq:
    case K::Alt: {
        if (e.items.empty()) {
            out += "\"\"";
            return;
        }
        if (nested) out += '(';
        for (size_t i = 0; i < e.items.size(); ++i) {
            if (i) out += e.kind == K::Seq ? " " : " | ";
            print_expr(out, g, e.items[i], true);
        }
        if (nested) out += ')';
        return;
    }
    }
}

}  // namespace

int32_t Grammar::rule(std::string_view name) {
    if (auto id = find(name)) return *id;
    if (!valid_rule_name(name)) fail("grammar: bad rule name '{}' (letters, digits, '_' and '-' only)", name);
    const auto id = static_cast<int32_t>(rules_.size());
    rules_.push_back({std::string(name), std::nullopt});
    index_.emplace(std::string(name), id);
    return id;
}

void Grammar::define(int32_t rule, GrammarExpr body) {
    STRATA_CHECK(rule >= 0 && rule < size(), "rule id {} out of range [0, {})", rule, size());
    if (rules_[rule].body) fail("grammar: rule '{}' is defined twice", rules_[rule].name);
    rules_[rule].body = std::move(body);
}

int32_t Grammar::add(std::string_view name, GrammarExpr body) {
    const int32_t id = rule(name);
    define(id, std::move(body));
    return id;
}

std::optional<int32_t> Grammar::find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

const std::string& Grammar::name(int32_t rule) const {
    STRATA_CHECK(rule >= 0 && rule < size(), "rule id {} out of range [0, {})", rule, size());
    return rules_[rule].name;
}

const GrammarExpr* Grammar::body(int32_t rule) const {
    STRATA_CHECK(rule >= 0 && rule < size(), "rule id {} out of range [0, {})", rule, size());
    return rules_[rule].body ? &*rules_[rule].body : nullptr;
}

std::string Grammar::to_text() const {
    std::string out;
    for (const Rule& r : rules_) {
        if (!r.body) continue;
        out += r.name;
        out += " ::= ";
        print_expr(out, *this, *r.body, false);
        out += '\n';
    }
    return out;
}

std::vector<CharRange> normalized_ranges(std::vector<CharRange> ranges, bool negated) {
    constexpr uint32_t kMaxCodePoint = 0x10FFFF;
    std::vector<CharRange> in;
    for (CharRange r : ranges)
        if (r.lo <= r.hi && r.lo <= kMaxCodePoint) in.push_back({r.lo, std::min(r.hi, kMaxCodePoint)});
    std::sort(in.begin(), in.end(), [](CharRange a, CharRange b) { return a.lo < b.lo; });
    std::vector<CharRange> merged;
    for (CharRange r : in) {
        if (!merged.empty() && r.lo <= merged.back().hi + 1) merged.back().hi = std::max(merged.back().hi, r.hi);
        else merged.push_back(r);
    }
    if (negated) {
        std::vector<CharRange> comp;
        uint32_t next = 0;
        for (CharRange r : merged) {
            if (r.lo > next) comp.push_back({next, r.lo - 1});
            next = r.hi + 1;
        }
        if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
        merged = std::move(comp);
    }
    std::vector<CharRange> out;  // without surrogates: they have no UTF-8 encoding
    for (CharRange r : merged) {
        if (r.hi < 0xD800 || r.lo > 0xDFFF) {
            out.push_back(r);
            continue;
        }
        if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
        if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
    }
    return out;
}

uint32_t next_utf8(std::string_view s, size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) fail("invalid UTF-8 at byte {}", i);
    uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if ((b >> 6) != 2) fail("invalid UTF-8 at byte {}", i);
        cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOfLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8 at byte {}", i);
    i += static_cast<size_t>(n);
    return cp;
}

}  // namespace strata
