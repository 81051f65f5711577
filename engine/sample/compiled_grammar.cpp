#include "engine/sample/compiled_grammar.h"

#include <algorithm>
#include <map>

#include "engine/core/error.h"
#include "engine/text/unicode.h"

namespace strata {

namespace {

using Op = CompiledGrammar::Op;
using Elem = CompiledGrammar::Elem;
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one byte range per position

constexpr int kMaxExprDepth = 1000;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// The UTF-8 encodings of the code points [lo, hi] as sequences of byte ranges, each
// sequence the product of its positions' ranges: split where the encoded length changes,
// then until every continuation position spans either one value or all 64.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
    static constexpr uint32_t kLast[3] = {0x7F, 0x7FF, 0xFFFF};
    for (uint32_t last : kLast) {
        if (lo <= last && hi > last) {
            utf8_sequences(lo, last, out);
            utf8_sequences(last + 1, hi, out);
            return;
        }
    }
    const int n = utf8_length(lo);
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;  // the bits of the last i bytes
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            utf8_sequences(lo, lo | m, out);
            utf8_sequences((lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            utf8_sequences(lo, (hi & ~m) - 1, out);
            utf8_sequences(hi & ~m, hi, out);
            return;
        }
    }
    std::string a, b;
    text::append_utf8(a, lo);
    text::append_utf8(b, hi);
    ByteRanges seq;
    for (int k = 0; k < n; ++k) seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
    out.push_back(std::move(seq));
}

class Flattener {
public:
    Flattener(const Grammar& g, CompiledGrammar& c) : g_(g), c_(c), flat_of_(static_cast<size_t>(g.size()), -1) {}

    void run(std::string_view root) {
        const auto r = g_.find(root);
        if (!r) fail("grammar: no rule '{}' to start from", root);
        c_.root = flat(*r);
        while (!pending_.empty()) {
            const int32_t named = pending_.back();
            pending_.pop_back();
            const GrammarExpr* body = g_.body(named);
            if (!body) fail("grammar: rule '{}' is used but not defined", g_.name(named));
            owner_ = g_.name(named);
            define(flat_of_[static_cast<size_t>(named)], *body, 0);
        }
    }

private:
    int32_t flat(int32_t named) {
        int32_t& f = flat_of_[static_cast<size_t>(named)];
        if (f < 0) {
            f = new_rule(g_.name(named));
            pending_.push_back(named);
        }
        return f;
    }

    int32_t new_rule(std::string name) {
        c_.alts.emplace_back();
        c_.names.push_back(std::move(name));
        return static_cast<int32_t>(c_.alts.size() - 1);
    }

    int32_t anonymous_rule() { return new_rule(fmt::format("{}/{}", owner_, c_.alts.size())); }

    void add_alternative(int32_t rule, const std::vector<Elem>& seq) {
        if (c_.elems.size() + seq.size() + 1 > CompiledGrammar::kMaxElements)
            fail("grammar: more than {} elements once repetitions are unrolled (in rule '{}')",
                 CompiledGrammar::kMaxElements, owner_);
        c_.alts[static_cast<size_t>(rule)].push_back(static_cast<int32_t>(c_.elems.size()));
        c_.elems.insert(c_.elems.end(), seq.begin(), seq.end());
        c_.elems.push_back({Op::End, 0});
    }

    void define(int32_t rule, const GrammarExpr& body, int depth) {
        if (body.kind != GrammarExpr::Kind::Alt) {
            add_alternative(rule, emitted(body, depth));
            return;
        }
        for (const GrammarExpr& a : body.items) add_alternative(rule, emitted(a, depth));
    }

    std::vector<Elem> emitted(const GrammarExpr& e, int depth) {
        std::vector<Elem> seq;
        emit(e, seq, depth);
        return seq;
    }

    int32_t set_index(const ByteSet& s) {
        auto [it, added] = set_ids_.emplace(s.bits, static_cast<int32_t>(c_.sets.size()));
        if (added) c_.sets.push_back(s);
        return it->second;
    }

    void emit(const GrammarExpr& e, std::vector<Elem>& seq, int depth) {
        if (depth > kMaxExprDepth) fail("grammar: expressions nest deeper than {} (in rule '{}')", kMaxExprDepth, owner_);
        if (seq.size() > CompiledGrammar::kMaxElements) fail("grammar: rule '{}' is too long once unrolled", owner_);
        using K = GrammarExpr::Kind;
        switch (e.kind) {
        case K::Literal:
            for (unsigned char b : e.literal) {
                ByteSet s;
                s.add(b, b);
                seq.push_back({Op::Byte, set_index(s)});
            }
            return;
        case K::Class: emit_class(e, seq); return;
        case K::Ref:
            STRATA_CHECK(e.rule >= 0 && e.rule < g_.size(), "rule id {} out of range", e.rule);
            seq.push_back({Op::Ref, flat(e.rule)});
            return;
        case K::Seq:
            for (const GrammarExpr& item : e.items) emit(item, seq, depth + 1);
            return;
        case K::Alt: {
            const int32_t r = anonymous_rule();
            define(r, e, depth + 1);
            seq.push_back({Op::Ref, r});
            return;
        }
        case K::Repeat: emit_repeat(e, seq, depth); return;
        }
    }

    // The repeated item as one element: itself when it lowers to one, else a rule.
    std::optional<Elem> unit_of(const GrammarExpr& item, int depth) {
        std::vector<Elem> u = emitted(item, depth + 1);
        if (u.empty()) return std::nullopt;  // repeating the empty string is the empty string
        if (u.size() == 1) return u[0];
        const int32_t r = anonymous_rule();
        add_alternative(r, u);
        return Elem{Op::Ref, r};
    }

    void emit_repeat(const GrammarExpr& e, std::vector<Elem>& seq, int depth) {
        // Checked before unrolling: the count alone could exhaust memory.
        constexpr auto kMax = static_cast<int64_t>(CompiledGrammar::kMaxElements);
        if (e.min > kMax || (e.max >= 0 && int64_t{e.max} - e.min > kMax / 4))
            fail("grammar: repetition {{{},{}}} in rule '{}' unrolls to too many elements", e.min, e.max, owner_);
        const std::optional<Elem> unit = unit_of(e.items[0], depth);
        if (!unit) return;
        for (int32_t k = 0; k < e.min; ++k) seq.push_back(*unit);
        if (e.max < 0) {  // star ::= unit star | ""
            const int32_t star = anonymous_rule();
            add_alternative(star, {*unit, {Op::Ref, star}});
            add_alternative(star, {});
            seq.push_back({Op::Ref, star});
            return;
        }
        // opt_j ::= unit opt_{j-1} | "": at most max - min more, without ambiguity.
        int32_t prev = -1;
        for (int32_t j = e.min; j < e.max; ++j) {
            const int32_t opt = anonymous_rule();
            std::vector<Elem> body{*unit};
            if (prev >= 0) body.push_back({Op::Ref, prev});
            add_alternative(opt, body);
            add_alternative(opt, {});
            prev = opt;
        }
        if (prev >= 0) seq.push_back({Op::Ref, prev});
    }

    void emit_class(const GrammarExpr& e, std::vector<Elem>& seq) {
        const std::vector<CharRange> ranges = normalized_ranges(e.ranges, e.negated);
        std::vector<ByteRanges> seqs;
        for (CharRange r : ranges) utf8_sequences(r.lo, r.hi, seqs);
        ByteSet ascii;
        bool multi = false;
        for (const ByteRanges& s : seqs) {
            if (s.size() == 1) ascii.add(s[0].first, s[0].second);
            else multi = true;
        }
        if (!multi) {
            seq.push_back({Op::Byte, set_index(ascii)});
            return;
        }
        std::vector<uint32_t> key;
        for (CharRange r : ranges) key.insert(key.end(), {r.lo, r.hi});
        auto [it, added] = class_rules_.emplace(std::move(key), 0);
        if (added) {
            it->second = anonymous_rule();
            if (ascii != ByteSet{}) add_alternative(it->second, {{Op::Byte, set_index(ascii)}});
            for (const ByteRanges& s : seqs) {
                if (s.size() == 1) continue;
                std::vector<Elem> alt;
                for (auto [lo, hi] : s) {
                    ByteSet b;
                    b.add(lo, hi);
                    alt.push_back({Op::Byte, set_index(b)});
                }
                add_alternative(it->second, alt);
            }
        }
        seq.push_back({Op::Ref, it->second});
    }

    const Grammar& g_;
    CompiledGrammar& c_;
    std::vector<int32_t> flat_of_;  // named rule -> flat rule, -1 until used
    std::vector<int32_t> pending_;  // named rules used but not yet lowered
    std::map<std::array<uint64_t, 4>, int32_t> set_ids_;
    std::map<std::vector<uint32_t>, int32_t> class_rules_;
    std::string owner_;  // the named rule being lowered, for names and errors
};

std::vector<char> nullable_rules(const CompiledGrammar& c) {
    std::vector<char> nullable(c.alts.size(), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < c.alts.size(); ++r) {
            if (nullable[r]) continue;
            for (int32_t start : c.alts[r]) {
                size_t p = static_cast<size_t>(start);
                while (c.elems[p].op == Op::Ref && nullable[static_cast<size_t>(c.elems[p].arg)]) ++p;
                if (c.elems[p].op == Op::End) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

// A rule that reaches itself at the left edge of its alternatives, through rules that
// can match nothing, would expand forever without reading a byte.
void refuse_left_recursion(const CompiledGrammar& c) {
    const std::vector<char> nullable = nullable_rules(c);
    std::vector<std::vector<int32_t>> left(c.alts.size());
    for (size_t r = 0; r < c.alts.size(); ++r) {
        for (int32_t start : c.alts[r]) {
            for (size_t p = static_cast<size_t>(start); c.elems[p].op == Op::Ref; ++p) {
                left[r].push_back(c.elems[p].arg);
                if (!nullable[static_cast<size_t>(c.elems[p].arg)]) break;
            }
        }
    }
    enum : char { kNew, kOnPath, kDone };
    std::vector<char> color(c.alts.size(), kNew);
    std::vector<std::pair<int32_t, size_t>> path;  // rule, next edge to follow
    for (size_t s = 0; s < c.alts.size(); ++s) {
        if (color[s] != kNew) continue;
        path.emplace_back(static_cast<int32_t>(s), 0);
        color[s] = kOnPath;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            const auto& edges = left[static_cast<size_t>(r)];
            if (next == edges.size()) {
                color[static_cast<size_t>(r)] = kDone;
                path.pop_back();
                continue;
            }
            const int32_t t = edges[next++];
            if (color[static_cast<size_t>(t)] == kOnPath)
                fail("grammar: rule '{}' is left-recursive (it can reach itself before reading a character; "
                     "a repetition of something that can match nothing does this too)",
                     c.names[static_cast<size_t>(t)]);
            if (color[static_cast<size_t>(t)] == kNew) {
                color[static_cast<size_t>(t)] = kOnPath;
                path.emplace_back(t, 0);
            }
        }
    }
}

}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& g, std::string_view root) {
    auto c = std::make_shared<CompiledGrammar>();
    Flattener(g, *c).run(root);
    refuse_left_recursion(*c);
    return c;
}

}  // namespace strata
