// What templates call: operators, filters, tests, the methods of str, list and dict that
// chat templates use, and the global functions HF provides. Each follows jinja2 3.1 (and
// Python under it), with transformers' own tojson.
#pragma once
#include <ctime>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "engine/text/jinja/ast.h"
#include "engine/text/jinja/value.h"

namespace strata::jinja {

Value binary_op(Op op, const Value& a, const Value& b);  // arithmetic, ~, comparisons, in
Value unary_op(Op op, const Value& a);                   // -, +, not

// Throw strata::Error for an unknown name or bad arguments.
Value apply_filter(std::string_view name, const Value& input, const Args& args);
bool apply_test(std::string_view name, const Value& input, const Args& args);

// `obj.name` for the Python methods of a str, list or dict, bound to obj; undefined when
// the type has none of that name. Mutating methods (list.append, dict.update) do not
// exist: HF's sandbox refuses them too.
Value method(const Value& obj, std::string_view name);

// Python's json.dumps options; transformers' tojson defaults to ensure_ascii=False.
struct JsonStyle {
    std::optional<std::string> indent;    // set: newlines, this per level
    std::optional<std::string> item_sep;  // unset: json.dumps' ", ", or "," with indent
    std::optional<std::string> key_sep;   // unset: ": "
    bool sort_keys = false;
    bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonStyle& style = {});

// `obj.name` and `obj[key]` as jinja2 looks them up (a dict's key, a list's index, a
// namespace's attribute, a method); undefined when absent. Reading from an undefined
// value is an error, as in jinja2.
Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
// The items a for loop or a filter walks: a list's, a dict's keys, a string's
// characters; none for undefined (jinja2's Undefined iterates as empty).
List iterate(const Value& v);

// `a.b.0` as the attribute= argument of filters names it.
Value get_path(const Value& obj, std::string_view path);

// str.strip and friends: `chars` null strips Python's whitespace (ASCII's and
// \x1c-\x1f, as str.isspace), else any of the code points of *chars. The kept part of s.
LStr py_strip(const LStr& s, const std::string* chars, bool left, bool right);

// Reads the arguments of a call against its parameter names, positional first.
class ArgReader {
public:
    ArgReader(const Args& args, std::string_view callee, std::initializer_list<std::string_view> params);
    const Value* get(size_t i) const { return i < vals_.size() ? vals_[i] : nullptr; }
    Value get_or(size_t i, Value def) const { return get(i) ? *get(i) : std::move(def); }
    std::string str(size_t i, std::string def) const;  // a str argument or def
    int64_t integer(size_t i, int64_t def) const;
    bool boolean(size_t i, bool def) const { return get(i) ? get(i)->truthy() : def; }

private:
    std::string callee_;
    std::vector<const Value*> vals_;
};

// The globals HF's environment has: range, dict, namespace, joiner, cycler,
// raise_exception, strftime_now (`now`: its clock; unset, the local time).
void add_globals(std::vector<std::pair<std::string, Value>>& out, std::optional<std::tm> now);

}  // namespace strata::jinja
