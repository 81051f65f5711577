#include "engine/text/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "engine/core/error.h"
#include "engine/text/jinja/lexer.h"

namespace strata::jinja {
namespace {

using K = Token::Kind;

// Deeper nesting than this (expressions or blocks) is refused rather than risking the
// stack on hostile input; real templates nest a handful of levels.
constexpr int kMaxDepth = 200;

ExprPtr node(Expr::Kind kind, size_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
}

ExprPtr binary(Op op, ExprPtr a, ExprPtr b, size_t pos) {
    auto e = node(Expr::Kind::Binary, pos);
    e->op = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
}

class Parser {
public:
    Parser(std::string_view src, std::vector<Token> toks) : src_(src), toks_(std::move(toks)) {}

    Body run() {
        std::string end;
        Body body = parse_body({}, end);
        return body;
    }

private:
    // ---------------------------------------------------------------- token helpers
    const Token& cur() const { return toks_[i_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
    const Token& next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
    bool is_op(std::string_view op) const { return cur().kind == K::Op && cur().text == op; }
    bool is_name(std::string_view n) const { return cur().kind == K::Name && cur().text == n; }
    bool skip_op(std::string_view op) { return is_op(op) && (next(), true); }
    bool skip_name(std::string_view n) { return is_name(n) && (next(), true); }

    [[noreturn]] void error(size_t pos, std::string_view what) const {
        fail("jinja: syntax error at {}: {}", location(src_, pos), what);
    }
    [[noreturn]] void unexpected(std::string_view wanted) const {
        std::string got = cur().kind == K::Eof        ? "end of template"
                          : cur().kind == K::BlockEnd ? "'%}'"
                          : cur().kind == K::VarEnd   ? "'}}'"
                                                      : "'" + cur().text + "'";
        error(cur().pos, fmt::format("expected {}, got {}", wanted, got));
    }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) unexpected(fmt::format("'{}'", op));
    }
    std::string expect_name() {
        if (cur().kind != K::Name) unexpected("a name");
        return next().text;
    }
    void expect_block_end() {
        if (cur().kind != K::BlockEnd) unexpected("'%}'");
        next();
    }

    struct DepthGuard {
        explicit DepthGuard(Parser& p) : p_(p) {
            if (++p_.depth_ > kMaxDepth) p_.error(p_.cur().pos, "nested too deeply");
        }
        ~DepthGuard() { --p_.depth_; }
        Parser& p_;
    };

    // ---------------------------------------------------------------- statements

    // Statements up to one of `ends` (a block tag name), which is consumed into `end`;
    // with no ends, up to the end of the template.
    Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
        DepthGuard guard(*this);
        Body body;
        for (;;) {
            const Token& t = cur();
            if (t.kind == K::Eof) {
                if (ends.size() == 0) return body;
                error(t.pos, fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
            }
            if (t.kind == K::Text) {
                body.push_back({t.pos, TextStmt{next().text}});
            } else if (t.kind == K::VarBegin) {
                next();
                ExprPtr e = parse_tuple(true);
                if (cur().kind != K::VarEnd) unexpected("'}}'");
                next();
                body.push_back({t.pos, PrintStmt{std::move(e)}});
            } else {
                next();  // BlockBegin
                std::string name = cur().kind == K::Name ? cur().text : "";
                for (auto e : ends) {
                    if (name == e) {
                        next();
                        end = name;
                        return body;
                    }
                }
                body.push_back(parse_statement(t.pos));
            }
        }
    }

    Stmt parse_statement(size_t pos) {
        std::string kw = expect_name();
        if (kw == "if") return {pos, parse_if()};
        if (kw == "for") return {pos, parse_for()};
        if (kw == "set") return {pos, parse_set()};
        if (kw == "macro") return {pos, parse_macro()};
        if (kw == "filter") return {pos, parse_filter_block()};
        if (kw == "break" || kw == "continue") {
            if (loop_depth_ == 0) error(pos, fmt::format("'{}' outside a for loop", kw));
            expect_block_end();
            return {pos, LoopControlStmt{kw == "break"}};
        }
        if (kw == "generation") {
            expect_block_end();
            std::string end;
            Body body = parse_body({"endgeneration"}, end);
            expect_block_end();
            return {pos, ScopeStmt{std::move(body)}};
        }
        error(pos, fmt::format("unknown or unsupported tag '{}'", kw));
    }

    IfStmt parse_if() {
        IfStmt s;
        std::string end = "elif";
        while (end == "elif") {
            ExprPtr cond = parse_tuple(true);
            expect_block_end();
            Body body = parse_body({"elif", "else", "endif"}, end);
            s.branches.emplace_back(std::move(cond), std::move(body));
        }
        if (end == "else") {
            expect_block_end();
            s.otherwise = parse_body({"endif"}, end);
        }
        expect_block_end();
        return s;
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        bool paren = skip_op("(");
        do {
            names.push_back(expect_name());
        } while (skip_op(","));
        if (paren) expect_op(")");
        return names;
    }

    ForStmt parse_for() {
        ForStmt s;
        s.targets = parse_targets();
        if (!skip_name("in")) unexpected("'in'");
        s.iter = parse_tuple(false);  // no `a if b else c` here: `if` filters the loop
        if (skip_name("if")) s.filter = parse_expression(true);
        if (is_name("recursive")) error(cur().pos, "recursive loops are not supported");
        expect_block_end();
        std::string end;
        ++loop_depth_;
        s.body = parse_body({"else", "endfor"}, end);
        --loop_depth_;
        if (end == "else") {
            expect_block_end();
            s.otherwise = parse_body({"endfor"}, end);
        }
        expect_block_end();
        return s;
    }

    SetStmt parse_set() {
        SetStmt s;
        s.targets.push_back(expect_name());
        if (skip_op(".")) {
            s.attr = expect_name();
        } else {
            while (skip_op(",")) s.targets.push_back(expect_name());
        }
        if (skip_op("=")) {
            s.value = parse_tuple(true);
            expect_block_end();
            return s;
        }
        if (s.targets.size() > 1 || !s.attr.empty()) unexpected("'='");
        s.filters = parse_filter_chain();
        expect_block_end();
        std::string end;
        s.body = parse_body({"endset"}, end);
        expect_block_end();
        return s;
    }

    MacroStmt parse_macro() {
        MacroStmt s;
        s.name = expect_name();
        expect_op("(");
        while (!skip_op(")")) {
            std::string param = expect_name();
            ExprPtr def = skip_op("=") ? parse_expression(true) : nullptr;
            s.params.emplace_back(std::move(param), std::move(def));
            if (!is_op(")")) expect_op(",");
        }
        expect_block_end();
        std::string end;
        int outer_loops = std::exchange(loop_depth_, 0);  // a macro's body is not in the loop
        s.body = std::make_shared<const Body>(parse_body({"endmacro"}, end));
        loop_depth_ = outer_loops;
        if (cur().kind == K::Name) next();  // {% endmacro name %}
        expect_block_end();
        return s;
    }

    FilterStmt parse_filter_block() {
        FilterStmt s;
        s.filters.push_back(parse_filter_call());
        for (auto more = parse_filter_chain(); auto& f : more) s.filters.push_back(std::move(f));
        expect_block_end();
        std::string end;
        s.body = parse_body({"endfilter"}, end);
        expect_block_end();
        return s;
    }

    std::vector<FilterCall> parse_filter_chain() {
        std::vector<FilterCall> chain;
        while (skip_op("|")) chain.push_back(parse_filter_call());
        return chain;
    }

    FilterCall parse_filter_call() {
        FilterCall f;
        f.name = expect_name();
        if (skip_op("(")) parse_call_args(f.args, f.kwargs);
        return f;
    }

    // ---------------------------------------------------------------- expressions

    // Expressions separated by commas make a tuple.
    ExprPtr parse_tuple(bool with_condexpr) {
        size_t pos = cur().pos;
        ExprPtr first = parse_expression(with_condexpr);
        if (!is_op(",")) return first;
        auto t = node(Expr::Kind::Tuple, pos);
        t->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (cur().kind == K::BlockEnd || cur().kind == K::VarEnd || is_op("=")) break;
            t->args.push_back(parse_expression(with_condexpr));
        }
        return t;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        DepthGuard guard(*this);
        ExprPtr e = parse_or();
        if (!with_condexpr) return e;
        while (is_name("if")) {
            size_t pos = next().pos;
            auto c = node(Expr::Kind::Cond, pos);
            c->args.push_back(std::move(e));
            c->args.push_back(parse_or());
            c->args.push_back(skip_name("else") ? parse_expression(true) : nullptr);
            e = std::move(c);
        }
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (is_name("or")) {
            size_t pos = next().pos;
            e = binary(Op::Or, std::move(e), parse_and(), pos);
        }
        return e;
    }

    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (is_name("and")) {
            size_t pos = next().pos;
            e = binary(Op::And, std::move(e), parse_not(), pos);
        }
        return e;
    }

    ExprPtr parse_not() {
        if (!is_name("not")) return parse_compare();
        DepthGuard guard(*this);
        auto e = node(Expr::Kind::Unary, next().pos);
        e->op = Op::Not;
        e->args.push_back(parse_not());
        return e;
    }

    // A comparison operator at the cursor (consumed), or false.
    bool comparison(Op& op) {
        static const std::pair<std::string_view, Op> ops[] = {{"==", Op::Eq}, {"!=", Op::Ne}, {"<", Op::Lt},
                                                              {"<=", Op::Le}, {">", Op::Gt},  {">=", Op::Ge}};
        for (auto [text, o] : ops) {
            if (skip_op(text)) return op = o, true;
        }
        if (skip_name("in")) return op = Op::In, true;
        if (is_name("not") && peek().kind == K::Name && peek().text == "in") {
            next(), next();
            return op = Op::NotIn, true;
        }
        return false;
    }

    // `a < b < c` is `a < b and b < c`, as in Python (b is evaluated twice: expressions
    // have no side effects here).
    ExprPtr parse_compare() {
        size_t pos = cur().pos;
        ExprPtr left = parse_math1();
        Op op;
        if (!comparison(op)) return left;
        ExprPtr result;
        do {
            ExprPtr right = parse_math1();
            ExprPtr next_left = clone(*right);
            ExprPtr cmp = binary(op, std::move(left), std::move(right), pos);
            result = result ? binary(Op::And, std::move(result), std::move(cmp), pos) : std::move(cmp);
            left = std::move(next_left);
        } while (comparison(op));
        return result;
    }

    static ExprPtr clone(const Expr& e) {
        auto c = node(e.kind, e.pos);
        c->op = e.op;
        c->negated = e.negated;
        c->name = e.name;
        c->value = e.value;
        for (const auto& a : e.args) c->args.push_back(a ? clone(*a) : nullptr);
        for (const auto& [k, v] : e.kwargs) c->kwargs.emplace_back(k, clone(*v));
        return c;
    }

    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            Op op = cur().text == "+" ? Op::Add : Op::Sub;
            size_t pos = next().pos;
            e = binary(op, std::move(e), parse_concat(), pos);
        }
        return e;
    }

    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (is_op("~")) {
            size_t pos = next().pos;
            e = binary(Op::Concat, std::move(e), parse_math2(), pos);
        }
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        for (;;) {
            Op op;
            if (is_op("*")) op = Op::Mul;
            else if (is_op("/")) op = Op::Div;
            else if (is_op("//")) op = Op::FloorDiv;
            else if (is_op("%")) op = Op::Mod;
            else return e;
            size_t pos = next().pos;
            e = binary(op, std::move(e), parse_pow(), pos);
        }
    }

    ExprPtr parse_pow() {
        ExprPtr e = parse_unary(true);
        while (is_op("**")) {
            size_t pos = next().pos;
            e = binary(Op::Pow, std::move(e), parse_unary(true), pos);
        }
        return e;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = node(Expr::Kind::Unary, cur().pos);
            e->op = next().text == "-" ? Op::Neg : Op::Pos;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        switch (t.kind) {
        case K::Name: return parse_name();
        case K::String: {
            std::string s;
            while (cur().kind == K::String) s += next().text;  // adjacent literals join
            auto e = node(Expr::Kind::Const, t.pos);
            e->value = Value::text(std::move(s));
            return e;
        }
        case K::Int:
        case K::Float: return parse_number();
        case K::Op:
            if (t.text == "(") return parse_paren();
            if (t.text == "[") return parse_list();
            if (t.text == "{") return parse_dict();
            [[fallthrough]];
        default: unexpected("an expression");
        }
    }

    ExprPtr parse_name() {
        size_t pos = cur().pos;
        std::string n = next().text;
        auto e = node(Expr::Kind::Const, pos);
        if (n == "true" || n == "True") e->value = Value::boolean(true);
        else if (n == "false" || n == "False") e->value = Value::boolean(false);
        else if (n == "none" || n == "None") e->value = Value::none();
        else {
            e->kind = Expr::Kind::Name;
            e->name = std::move(n);
        }
        return e;
    }

    ExprPtr parse_number() {
        const Token& t = next();
        auto e = node(Expr::Kind::Const, t.pos);
        if (t.kind == K::Float) {
            e->value = Value::real(std::strtod(t.text.c_str(), nullptr));
            return e;
        }
        int64_t v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc()) error(t.pos, "integer literal out of range");
        e->value = Value::integer(v);
        return e;
    }

    ExprPtr parse_paren() {
        size_t pos = next().pos;
        if (skip_op(")")) return node(Expr::Kind::Tuple, pos);  // ()
        ExprPtr e = parse_expression(true);
        if (is_op(",")) {
            auto t = node(Expr::Kind::Tuple, pos);
            t->args.push_back(std::move(e));
            while (skip_op(",") && !is_op(")")) t->args.push_back(parse_expression(true));
            e = std::move(t);
        }
        expect_op(")");
        return e;
    }

    ExprPtr parse_list() {
        auto e = node(Expr::Kind::List, next().pos);
        while (!skip_op("]")) {
            e->args.push_back(parse_expression(true));
            if (!is_op("]")) expect_op(",");
        }
        return e;
    }

    ExprPtr parse_dict() {
        auto e = node(Expr::Kind::Dict, next().pos);
        while (!skip_op("}")) {
            e->args.push_back(parse_expression(true));
            expect_op(":");
            e->args.push_back(parse_expression(true));
            if (!is_op("}")) expect_op(",");
        }
        return e;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        for (;;) {
            if (is_op(".")) {
                size_t pos = next().pos;
                if (cur().kind == K::Int) {  // x.0 is x[0]
                    auto item = node(Expr::Kind::Item, pos);
                    item->args.push_back(std::move(e));
                    item->args.push_back(parse_number());
                    e = std::move(item);
                    continue;
                }
                auto a = node(Expr::Kind::Attr, pos);
                a->name = expect_name();
                a->args.push_back(std::move(e));
                e = std::move(a);
            } else if (is_op("[")) {
                e = parse_subscript(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr obj) {
        size_t pos = next().pos;
        ExprPtr bounds[3];
        int parts = 0;
        for (;;) {
            if (!is_op(":") && !is_op("]")) bounds[parts] = parse_expression(true);
            if (skip_op("]")) break;
            if (++parts > 2) unexpected("']'");
            expect_op(":");
        }
        auto e = node(parts == 0 ? Expr::Kind::Item : Expr::Kind::Slice, pos);
        e->args.push_back(std::move(obj));
        if (parts == 0) {
            if (!bounds[0]) error(pos, "empty subscript");
            e->args.push_back(std::move(bounds[0]));
        } else {
            for (auto& b : bounds) e->args.push_back(std::move(b));
        }
        return e;
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = node(Expr::Kind::Call, next().pos);
        e->args.push_back(std::move(callee));
        parse_call_args(e->args, e->kwargs);
        return e;
    }

    // After "(": arguments up to and including ")".
    void parse_call_args(std::vector<ExprPtr>& args, std::vector<std::pair<std::string, ExprPtr>>& kwargs) {
        while (!skip_op(")")) {
            if (cur().kind == K::Name && peek().kind == K::Op && peek().text == "=") {
                std::string key = next().text;
                next();
                kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (!kwargs.empty()) error(cur().pos, "positional argument after keyword argument");
                args.push_back(parse_expression(true));
            }
            if (!is_op(")")) expect_op(",");
        }
    }

    ExprPtr parse_filter_expr(ExprPtr e) {
        for (;;) {
            if (is_op("|")) {
                auto f = node(Expr::Kind::Filter, next().pos);
                f->args.push_back(std::move(e));
                f->name = expect_name();
                if (skip_op("(")) parse_call_args(f->args, f->kwargs);
                e = std::move(f);
            } else if (is_name("is")) {
                e = parse_test(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    // `is [not] name`, with arguments in parentheses or one bare argument (`is sameas x`).
    ExprPtr parse_test(ExprPtr subject) {
        auto t = node(Expr::Kind::Test, next().pos);
        t->negated = skip_name("not");
        t->name = expect_name();
        t->args.push_back(std::move(subject));
        if (skip_op("(")) {
            parse_call_args(t->args, t->kwargs);
        } else if (starts_bare_argument()) {
            t->args.push_back(parse_postfix(parse_primary()));
        }
        return t;
    }

    bool starts_bare_argument() const {
        switch (cur().kind) {
        case K::Name: return !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is");
        case K::String:
        case K::Int:
        case K::Float: return true;
        case K::Op: return is_op("[") || is_op("{");
        default: return false;
        }
    }

    std::string_view src_;
    std::vector<Token> toks_;
    size_t i_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;  // for loops around the cursor: where break and continue may stand
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(source, tokenize(source)).run(); }

}  // namespace strata::jinja
