// Value: what a Jinja expression evaluates to, with Python's semantics as jinja2 gives
// them (truthiness, ==, ordering, str() and repr()). Lists and dicts are immutable once
// built (the sandbox HF uses forbids mutating them) and shared by pointer, so copying a
// Value is cheap; a namespace() is the one mutable object.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/text/jinja/lstr.h"

namespace strata::jinja {

class Value;
using List = std::vector<Value>;  // the items of a list or a tuple

// A dict in insertion order, like Python's; chat-template dicts are small, so lookup is
// a scan.
struct Dict {
    std::vector<std::pair<Value, Value>> items;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
};

// namespace(): attributes the template may assign with {% set ns.x = ... %}.
struct Namespace {
    std::vector<std::pair<std::string, Value>> attrs;
    Value* find(std::string_view name);
};

// Arguments of a call, filter, test or method: positional then keyword.
struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
    std::string name;
    std::function<Value(const Args&)> fn;
};

struct Undefined {};
struct None {};

class Value {
public:
    Value() = default;  // undefined
    static Value none() { return Value(Data(None{})); }
    static Value boolean(bool b) { return Value(Data(b)); }
    static Value integer(int64_t i) { return Value(Data(i)); }
    static Value real(double d) { return Value(Data(d)); }
    static Value string(LStr s) { return Value(Data(std::make_shared<const LStr>(std::move(s)))); }
    static Value text(std::string s) { return string(LStr(std::move(s))); }  // template text
    static Value list(List l) { return Value(Data(std::make_shared<const List>(std::move(l)))); }
    static Value tuple(List l);  // a list that prints as (a, b) and never equals a list
    static Value dict(Dict d) { return Value(Data(std::make_shared<const Dict>(std::move(d)))); }
    static Value ns(Namespace n) { return Value(Data(std::make_shared<Namespace>(std::move(n)))); }
    static Value function(std::string name, std::function<Value(const Args&)> fn);
    // JSON from the caller: every string in it (keys too) is literal text. Dicts keep
    // the JSON object's order: ordered_json's is the caller's, as Python's would be.
    static Value from_json(const nlohmann::json& j);
    static Value from_json(const nlohmann::ordered_json& j);

    bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
    bool is_none() const { return std::holds_alternative<None>(v_); }
    bool is_bool() const { return std::holds_alternative<bool>(v_); }
    bool is_int() const { return std::holds_alternative<int64_t>(v_); }
    bool is_float() const { return std::holds_alternative<double>(v_); }
    bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python's Number
    bool is_str() const { return std::holds_alternative<StrPtr>(v_); }
    bool is_list() const { return std::holds_alternative<ListPtr>(v_); }  // tuples too
    bool is_tuple() const { return tuple_; }
    bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
    bool is_ns() const { return std::holds_alternative<NsPtr>(v_); }
    bool is_callable() const { return std::holds_alternative<FnPtr>(v_); }

    bool as_bool() const { return std::get<bool>(v_); }
    int64_t as_int() const;  // int or bool
    double as_float() const;  // any number
    const LStr& str() const { return *std::get<StrPtr>(v_); }
    const List& list() const { return *std::get<ListPtr>(v_); }
    const Dict& dict() const { return *std::get<DictPtr>(v_); }
    Namespace& ns() const { return *std::get<NsPtr>(v_); }
    const Callable& callable() const { return *std::get<FnPtr>(v_); }

    const char* type_name() const;  // Python's, for messages
    bool truthy() const;
    // str(value) as jinja2 prints it: None, True, 1.5, ['a', 1], {'k': 'v'}; undefined
    // prints nothing. Strings keep their literal ranges; a list or dict that holds
    // literal text is literal as a whole.
    LStr to_str() const;
    std::string repr() const;
    bool has_literal() const;  // any literal text inside (strings, keys, items)

private:
    using StrPtr = std::shared_ptr<const LStr>;
    using ListPtr = std::shared_ptr<const List>;
    using DictPtr = std::shared_ptr<const Dict>;
    using NsPtr = std::shared_ptr<Namespace>;
    using FnPtr = std::shared_ptr<const Callable>;
    using Data = std::variant<Undefined, None, bool, int64_t, double, StrPtr, ListPtr, DictPtr,
                              NsPtr, FnPtr>;
    explicit Value(Data v) : v_(std::move(v)) {}
    void repr_into(std::string& out) const;  // one buffer: linear even when parts are shared

    Data v_;
    bool tuple_ = false;
};

// No string or list a template builds may exceed this: values can share parts, so a
// few steps can describe an exponentially large text, and building it must stop early.
constexpr size_t kMaxTextBytes = size_t{64} << 20;
void check_text_size(size_t bytes);  // throws past kMaxTextBytes

// Whether v holds a namespace (itself or inside a list or dict): a namespace attribute
// may not, which keeps values acyclic (a namespace holding itself would never be freed
// and would print forever).
bool holds_namespace(const Value& v);

bool equal(const Value& a, const Value& b);  // Python ==
int compare(const Value& a, const Value& b);  // Python <, for numbers and strings; throws otherwise
std::string float_repr(double d);             // Python's repr(float)
std::string string_repr(std::string_view s);  // Python's repr(str)

}  // namespace strata::jinja
