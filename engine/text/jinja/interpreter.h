// The interpreter: walks the syntax tree over a context, writing the output with its
// literal ranges. One Interpreter renders once; the tree is shared and never changed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/text/jinja/ast.h"

namespace strata::jinja {

// Variables visible at a point of the template. A for loop and a macro call open a
// child scope, so what they set stays inside (jinja2's rule: use a namespace to carry
// a value out); if-blocks do not.
struct Scope {
    std::shared_ptr<Scope> parent;
    std::unordered_map<std::string, Value> vars;
    const Value* find(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

struct Limits {
    size_t max_output = size_t{16} << 20;  // bytes of rendered text
    int max_call_depth = 64;               // nested macro calls
    uint64_t max_steps = 1'000'000;        // statements and loop iterations (a chat: thousands)
};

class Interpreter {
public:
    Interpreter(std::string_view source, const Limits& limits) : source_(source), limits_(limits) {}
    LStr render(const Body& body, const ScopePtr& globals);

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec(const Body& body, const ScopePtr& scope);
    Flow exec(const Stmt& stmt, const ScopePtr& scope);
    Flow exec_if(const IfStmt& s, const ScopePtr& scope);
    Flow exec_for(const ForStmt& s, const ScopePtr& scope);
    void exec_set(const SetStmt& s, const ScopePtr& scope);
    void define_macro(const MacroStmt& s, const ScopePtr& scope);
    Value call_macro(const MacroStmt& m, const ScopePtr& closure, const Args& args);
    LStr capture(const Body& body, const ScopePtr& scope);
    Value apply_filters(const std::vector<FilterCall>& chain, Value v, const ScopePtr& scope);

    Value eval(const Expr& e, const ScopePtr& scope);
    Value eval_call(const Expr& e, const ScopePtr& scope);
    Value eval_slice(const Expr& e, const ScopePtr& scope);
    Args eval_args(const std::vector<ExprPtr>& args, size_t first,
                   const std::vector<std::pair<std::string, ExprPtr>>& kwargs, const ScopePtr& scope);

    void write(const LStr& s);
    void write(std::string_view s);
    void step();

    std::string_view source_;
    Limits limits_;
    LStr* out_ = nullptr;  // where output goes now: the result, or a capture
    int call_depth_ = 0;
    uint64_t steps_ = 0;
    bool located_ = false;  // the error being thrown already names its template line
    std::vector<ScopePtr> macro_scopes_;  // scopes that define macros, alive for the render
};

}  // namespace strata::jinja
