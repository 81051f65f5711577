// The syntax tree the parser builds and the interpreter walks. Every node keeps the
// byte offset of its source for error messages.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/text/jinja/value.h"

namespace strata::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class Op {
    Add, Sub, Mul, Div, FloorDiv, Mod, Pow, Concat,  // arithmetic and ~
    Eq, Ne, Lt, Le, Gt, Ge, In, NotIn,               // comparisons
    And, Or, Not, Neg, Pos,
};

struct Expr {
    enum class Kind {
        Const,    // value
        Name,     // name
        Attr,     // args[0].name
        Item,     // args[0][args[1]]
        Slice,    // args[0][args[1]:args[2]:args[3]], each bound may be null
        Call,     // args[0](args[1:], kwargs)
        Filter,   // args[0] | name(args[1:], kwargs)
        Test,     // args[0] is [not] name(args[1:])
        Unary,    // op args[0]
        Binary,   // args[0] op args[1]
        Cond,     // args[0] if args[1] else args[2] (null: undefined)
        List,     // [args...]
        Tuple,    // (args...)
        Dict,     // {args[0]: args[1], ...}
    };
    Kind kind;
    size_t pos;
    Op op = Op::Add;
    bool negated = false;  // Test: "is not"
    std::string name;
    Value value;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<Stmt>;

// `| name(args)`, as a {% filter %} block or a block {% set %} applies it.
struct FilterCall {
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct TextStmt {
    std::string text;
};
struct PrintStmt {
    ExprPtr expr;
};
struct IfStmt {
    std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
    Body otherwise;
};
struct ForStmt {
    std::vector<std::string> targets;  // several: each item is unpacked
    ExprPtr iter;
    ExprPtr filter;  // `for x in xs if cond`, may be null
    Body body;
    Body otherwise;  // runs when there was no iteration
};
struct SetStmt {
    std::vector<std::string> targets;  // several: the value is unpacked
    std::string attr;                  // {% set ns.attr = ... %}: targets[0] is the namespace
    ExprPtr value;                     // null: the block form, whose text is the value
    Body body;
    std::vector<FilterCall> filters;   // block form: applied to its text
};
struct MacroStmt {
    std::string name;
    std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
    std::shared_ptr<const Body> body;  // shared with the macro values made from it
};
struct FilterStmt {
    std::vector<FilterCall> filters;
    Body body;
};
struct LoopControlStmt {
    bool is_break;
};
// HF's {% generation %} marks assistant text for training masks; rendering ignores it.
struct ScopeStmt {
    Body body;
};

struct Stmt {
    size_t pos;
    std::variant<TextStmt, PrintStmt, IfStmt, ForStmt, SetStmt, MacroStmt, FilterStmt, LoopControlStmt,
                 ScopeStmt>
        node;
};

}  // namespace strata::jinja
