#include "engine/text/jinja/interpreter.h"

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"
#include "engine/text/jinja/lexer.h"

namespace strata::jinja {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

// `for a, b in pairs` and `{% set a, b = ... %}`: one item per name.
void bind_targets(const std::vector<std::string>& names, const Value& v, Scope& scope) {
    if (names.size() == 1) {
        scope.vars[names[0]] = v;
        return;
    }
    List items = iterate(v);
    if (items.size() != names.size()) fail("jinja: cannot unpack {} values into {} names", items.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) scope.vars[names[i]] = items[i];
}

// The `loop` variable of iteration i over items.
Value loop_info(const List& items, size_t i) {
    auto n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
    Dict d;
    auto set = [&](const char* name, Value v) { d.items.emplace_back(Value::text(name), std::move(v)); };
    set("index", Value::integer(k + 1));
    set("index0", Value::integer(k));
    set("revindex", Value::integer(n - k));
    set("revindex0", Value::integer(n - k - 1));
    set("first", Value::boolean(k == 0));
    set("last", Value::boolean(k == n - 1));
    set("length", Value::integer(n));
    set("depth", Value::integer(1));
    set("depth0", Value::integer(0));
    if (i > 0) set("previtem", items[i - 1]);
    if (i + 1 < items.size()) set("nextitem", items[i + 1]);
    set("cycle", Value::function("cycle", [k](const Args& a) {
        if (a.pos.empty()) fail("jinja: loop.cycle needs at least one argument");
        return a.pos[static_cast<size_t>(k) % a.pos.size()];
    }));
    return Value::dict(std::move(d));
}

// Python's slice.indices: the positions a[start:stop:step] takes from a sequence of n.
std::vector<size_t> slice_positions(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step, int64_t n) {
    auto clamp = [&](std::optional<int64_t> x, int64_t def) {
        if (!x) return def;
        int64_t v = *x < 0 ? *x + n : *x;
        return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    int64_t b = clamp(start, step > 0 ? 0 : n - 1), e = clamp(stop, step > 0 ? n : -1);
    std::vector<size_t> out;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(static_cast<size_t>(i));
    return out;
}

}  // namespace

const Value* Scope::find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
        if (auto it = s->vars.find(name); it != s->vars.end()) return &it->second;
    }
    return nullptr;
}

LStr Interpreter::render(const Body& body, const ScopePtr& globals) {
    LStr out;
    out_ = &out;
    exec(body, globals);
    out_ = nullptr;
    return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const ScopePtr& scope) {
    for (const Stmt& s : body) {
        if (Flow f = exec(s, scope); f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const ScopePtr& scope) {
    step();
    try {
        return std::visit(
            Overloaded{
                [&](const TextStmt& s) { return write(s.text), Flow::Normal; },
                [&](const PrintStmt& s) { return write(eval(*s.expr, scope).to_str()), Flow::Normal; },
                [&](const IfStmt& s) { return exec_if(s, scope); },
                [&](const ForStmt& s) { return exec_for(s, scope); },
                [&](const SetStmt& s) { return exec_set(s, scope), Flow::Normal; },
                [&](const MacroStmt& s) { return define_macro(s, scope), Flow::Normal; },
                [&](const FilterStmt& s) {
                    Value v = apply_filters(s.filters, Value::string(capture(s.body, scope)), scope);
                    return write(v.to_str()), Flow::Normal;
                },
                [&](const LoopControlStmt& s) { return s.is_break ? Flow::Break : Flow::Continue; },
                [&](const ScopeStmt& s) { return exec(s.body, scope); },
            },
            stmt.node);
    } catch (const Error& e) {
        if (located_) throw;
        located_ = true;  // the innermost statement names the place; outer ones pass it on
        throw Error(fmt::format("{} (template {})", e.what(), location(source_, stmt.pos)));
    }
}

Interpreter::Flow Interpreter::exec_if(const IfStmt& s, const ScopePtr& scope) {
    for (const auto& [cond, body] : s.branches) {
        if (eval(*cond, scope).truthy()) return exec(body, scope);
    }
    return exec(s.otherwise, scope);
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& s, const ScopePtr& scope) {
    List items = iterate(eval(*s.iter, scope));
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    if (s.filter) {  // `for x in xs if cond`: loop.index and length count the kept items
        List kept;
        for (auto& v : items) {
            bind_targets(s.targets, v, *inner);
            if (eval(*s.filter, inner).truthy()) kept.push_back(std::move(v));
        }
        items = std::move(kept);
    }
    for (size_t i = 0; i < items.size(); ++i) {
        step();
        bind_targets(s.targets, items[i], *inner);
        inner->vars["loop"] = loop_info(items, i);
        if (exec(s.body, inner) == Flow::Break) break;
    }
    return items.empty() ? exec(s.otherwise, scope) : Flow::Normal;
}

void Interpreter::exec_set(const SetStmt& s, const ScopePtr& scope) {
    if (!s.value) {
        scope->vars[s.targets[0]] = apply_filters(s.filters, Value::string(capture(s.body, scope)), scope);
        return;
    }
    Value v = eval(*s.value, scope);
    if (s.attr.empty()) {
        bind_targets(s.targets, v, *scope);
        return;
    }
    const Value* ns = scope->find(s.targets[0]);
    if (!ns || !ns->is_ns()) fail("jinja: cannot assign attribute '{}': '{}' is not a namespace", s.attr, s.targets[0]);
    if (holds_namespace(v)) fail("jinja: namespace attribute '{}' cannot hold a namespace", s.attr);
    if (Value* slot = ns->ns().find(s.attr)) *slot = std::move(v);
    else ns->ns().attrs.emplace_back(s.attr, std::move(v));
}

// The macro value holds its defining scope weakly (a strong pointer would be a cycle
// through the scope's own variables); macro_scopes_ keeps that scope alive for the render.
void Interpreter::define_macro(const MacroStmt& s, const ScopePtr& scope) {
    macro_scopes_.push_back(scope);
    std::weak_ptr<Scope> closure = scope;
    scope->vars[s.name] = Value::function(s.name, [this, &s, closure](const Args& a) {
        return call_macro(s, closure.lock(), a);
    });
}

Value Interpreter::call_macro(const MacroStmt& m, const ScopePtr& closure, const Args& args) {
    if (args.pos.size() > m.params.size()) {
        fail("jinja: macro '{}' takes {} arguments, {} given", m.name, m.params.size(), args.pos.size());
    }
    struct DepthGuard {
        explicit DepthGuard(int& d) : d_(++d) {}
        ~DepthGuard() { --d_; }
        int& d_;
    } guard(call_depth_);
    if (call_depth_ > limits_.max_call_depth) fail("jinja: macro calls nested deeper than {}", limits_.max_call_depth);
    auto frame = std::make_shared<Scope>();
    frame->parent = closure;
    for (const auto& [name, value] : args.kw) {
        bool known = std::any_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == name; });
        if (!known) fail("jinja: macro '{}' has no parameter '{}'", m.name, name);
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
        const auto& [name, def] = m.params[i];
        auto kw = std::find_if(args.kw.begin(), args.kw.end(), [&](const auto& p) { return p.first == name; });
        if (i < args.pos.size()) frame->vars[name] = args.pos[i];
        else if (kw != args.kw.end()) frame->vars[name] = kw->second;
        else frame->vars[name] = def ? eval(*def, frame) : Value();
    }
    return Value::string(capture(*m.body, frame));
}

LStr Interpreter::capture(const Body& body, const ScopePtr& scope) {
    LStr buf;
    struct Redirect {
        Redirect(LStr*& out, LStr* to) : out_(out), saved_(out) { out = to; }
        ~Redirect() { out_ = saved_; }
        LStr*& out_;
        LStr* saved_;
    } redirect(out_, &buf);
    exec(body, scope);
    return buf;
}

Value Interpreter::apply_filters(const std::vector<FilterCall>& chain, Value v, const ScopePtr& scope) {
    for (const auto& f : chain) v = apply_filter(f.name, v, eval_args(f.args, 0, f.kwargs, scope));
    return v;
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
    using K = Expr::Kind;
    switch (e.kind) {
    case K::Const: return e.value;
    case K::Name: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value();
    }
    case K::Attr: return get_attr(eval(*e.args[0], scope), e.name);
    case K::Item: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case K::Slice: return eval_slice(e, scope);
    case K::Call: return eval_call(e, scope);
    case K::Filter: {
        Value in = eval(*e.args[0], scope);
        return apply_filter(e.name, in, eval_args(e.args, 1, e.kwargs, scope));
    }
    case K::Test: {
        Value in = eval(*e.args[0], scope);
        return Value::boolean(apply_test(e.name, in, eval_args(e.args, 1, e.kwargs, scope)) != e.negated);
    }
    case K::Unary: return unary_op(e.op, eval(*e.args[0], scope));
    case K::Binary: {
        Value a = eval(*e.args[0], scope);
        if (e.op == Op::And) return a.truthy() ? eval(*e.args[1], scope) : a;
        if (e.op == Op::Or) return a.truthy() ? a : eval(*e.args[1], scope);
        return binary_op(e.op, a, eval(*e.args[1], scope));
    }
    case K::Cond:
        if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
        return e.args[2] ? eval(*e.args[2], scope) : Value();
    case K::List:
    case K::Tuple: {
        List l;
        l.reserve(e.args.size());
        for (const auto& a : e.args) l.push_back(eval(*a, scope));
        return e.kind == K::Tuple ? Value::tuple(std::move(l)) : Value::list(std::move(l));
    }
    case K::Dict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
            Value k = eval(*e.args[i], scope), v = eval(*e.args[i + 1], scope);
            auto same = [&](const auto& kv) { return equal(kv.first, k); };
            if (auto it = std::find_if(d.items.begin(), d.items.end(), same); it != d.items.end()) it->second = v;
            else d.items.emplace_back(std::move(k), std::move(v));
        }
        return Value::dict(std::move(d));
    }
    }
    fail("jinja: bad expression node");
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
    Value callee = eval(*e.args[0], scope);
    if (!callee.is_callable()) {
        if (callee.is_undefined()) fail("jinja: '{}' is undefined", e.args[0]->name);
        fail("jinja: '{}' object is not callable", callee.type_name());
    }
    return callee.callable().fn(eval_args(e.args, 1, e.kwargs, scope));
}

Value Interpreter::eval_slice(const Expr& e, const ScopePtr& scope) {
    Value obj = eval(*e.args[0], scope);
    auto bound = [&](size_t k) -> std::optional<int64_t> {
        if (!e.args[k]) return std::nullopt;
        Value v = eval(*e.args[k], scope);
        if (v.is_none()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) fail("jinja: slice indices must be integers, not '{}'", v.type_name());
        return v.as_int();
    };
    std::optional<int64_t> start = bound(1), stop = bound(2);
    int64_t step = bound(3).value_or(1);
    if (step == 0) fail("jinja: slice step cannot be zero");
    if (obj.is_list()) {
        List out;
        for (size_t i : slice_positions(start, stop, step, static_cast<int64_t>(obj.list().size()))) out.push_back(obj.list()[i]);
        return Value::list(std::move(out));
    }
    if (!obj.is_str()) fail("jinja: '{}' object is not subscriptable", obj.type_name());
    const LStr& s = obj.str();
    auto off = code_point_offsets(s.text);
    LStr out;
    for (size_t i : slice_positions(start, stop, step, static_cast<int64_t>(off.size()) - 1)) {
        out.append(s.substr(off[i], off[i + 1] - off[i]));
    }
    return Value::string(std::move(out));
}

Args Interpreter::eval_args(const std::vector<ExprPtr>& args, size_t first,
                            const std::vector<std::pair<std::string, ExprPtr>>& kwargs, const ScopePtr& scope) {
    Args a;
    for (size_t i = first; i < args.size(); ++i) a.pos.push_back(eval(*args[i], scope));
    for (const auto& [k, v] : kwargs) a.kw.emplace_back(k, eval(*v, scope));
    return a;
}

void Interpreter::write(const LStr& s) {
    out_->append(s);
    if (out_->text.size() > limits_.max_output) fail("jinja: output exceeds {} bytes", limits_.max_output);
}

void Interpreter::write(std::string_view s) {
    out_->append(s);
    if (out_->text.size() > limits_.max_output) fail("jinja: output exceeds {} bytes", limits_.max_output);
}

void Interpreter::step() {
    if (++steps_ > limits_.max_steps) fail("jinja: template ran more than {} steps", limits_.max_steps);
}

}  // namespace strata::jinja
