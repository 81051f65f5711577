// The tests (`value is name(args)`) of jinja2 3.1, and the global functions of HF's
// chat-template environment.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"

namespace strata::jinja {
namespace {

using TestFn = bool (*)(const Value& v, const Args& a);

const Value& operand(const Args& a, const char* test) {
    if (a.pos.size() != 1 || !a.kw.empty()) fail("jinja: test '{}' takes one argument", test);
    return a.pos[0];
}

bool no_args(const Args& a, const char* test) {
    if (!a.pos.empty() || !a.kw.empty()) fail("jinja: test '{}' takes no arguments", test);
    return true;
}

bool integral(const Value& v) { return v.is_int(); }  // jinja2: int but not bool

bool has_case(const Value& v, bool upper) {
    if (!v.is_str()) return false;
    bool cased = false;
    for (char c : v.str().text) {
        auto u = static_cast<unsigned char>(c);
        if (std::isalpha(u)) {
            if ((upper ? std::islower(u) : std::isupper(u)) != 0) return false;
            cased = true;
        }
    }
    return cased;
}

const std::unordered_map<std::string_view, TestFn>& tests() {
    // jinja2's Undefined counts as iterable and as a sequence (it has __iter__, __len__
    // and __getitem__), so `x is iterable` is true for a missing x, as there.
    static const std::unordered_map<std::string_view, TestFn> table = {
        {"defined", [](const Value& v, const Args& a) { return no_args(a, "defined") && !v.is_undefined(); }},
        {"undefined", [](const Value& v, const Args& a) { return no_args(a, "undefined") && v.is_undefined(); }},
        {"none", [](const Value& v, const Args& a) { return no_args(a, "none") && v.is_none(); }},
        {"boolean", [](const Value& v, const Args& a) { return no_args(a, "boolean") && v.is_bool(); }},
        {"true", [](const Value& v, const Args& a) { return no_args(a, "true") && v.is_bool() && v.as_bool(); }},
        {"false", [](const Value& v, const Args& a) { return no_args(a, "false") && v.is_bool() && !v.as_bool(); }},
        {"integer", [](const Value& v, const Args& a) { return no_args(a, "integer") && integral(v); }},
        {"float", [](const Value& v, const Args& a) { return no_args(a, "float") && v.is_float(); }},
        {"number", [](const Value& v, const Args& a) { return no_args(a, "number") && v.is_number(); }},
        {"string", [](const Value& v, const Args& a) { return no_args(a, "string") && v.is_str(); }},
        {"mapping", [](const Value& v, const Args& a) { return no_args(a, "mapping") && v.is_dict(); }},
        {"iterable", [](const Value& v, const Args& a) {
             return no_args(a, "iterable") && (v.is_str() || v.is_list() || v.is_dict() || v.is_undefined());
         }},
        {"sequence", [](const Value& v, const Args& a) {
             return no_args(a, "sequence") && (v.is_str() || v.is_list() || v.is_dict() || v.is_undefined());
         }},
        {"callable", [](const Value& v, const Args& a) { return no_args(a, "callable") && v.is_callable(); }},
        {"lower", [](const Value& v, const Args& a) { return no_args(a, "lower") && has_case(v, false); }},
        {"upper", [](const Value& v, const Args& a) { return no_args(a, "upper") && has_case(v, true); }},
        {"odd", [](const Value& v, const Args& a) { return no_args(a, "odd") && integral(v) && v.as_int() % 2 != 0; }},
        {"even", [](const Value& v, const Args& a) { return no_args(a, "even") && integral(v) && v.as_int() % 2 == 0; }},
        {"divisibleby", [](const Value& v, const Args& a) {
             const Value& d = operand(a, "divisibleby");
             if (!integral(v) || !integral(d) || d.as_int() == 0) fail("jinja: divisibleby needs nonzero integers");
             return v.as_int() % d.as_int() == 0;
         }},
        {"in", [](const Value& v, const Args& a) { return binary_op(Op::In, v, operand(a, "in")).truthy(); }},
        {"sameas", [](const Value& v, const Args& a) {  // identity: exact for None and the booleans
             const Value& o = operand(a, "sameas");
             return std::string_view(v.type_name()) == o.type_name() && equal(v, o);
         }},
        {"eq", [](const Value& v, const Args& a) { return equal(v, operand(a, "eq")); }},
        {"ne", [](const Value& v, const Args& a) { return !equal(v, operand(a, "ne")); }},
        {"lt", [](const Value& v, const Args& a) { return compare(v, operand(a, "lt")) < 0; }},
        {"le", [](const Value& v, const Args& a) { return compare(v, operand(a, "le")) <= 0; }},
        {"gt", [](const Value& v, const Args& a) { return compare(v, operand(a, "gt")) > 0; }},
        {"ge", [](const Value& v, const Args& a) { return compare(v, operand(a, "ge")) >= 0; }},
    };
    return table;
}

// jinja2's other names for the comparison tests.
std::string_view canonical_test(std::string_view name) {
    static const std::pair<std::string_view, std::string_view> aliases[] = {
        {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"},          {"lessthan", "lt"},
        {"<=", "le"}, {">", "gt"},       {">=", "ge"}, {"greaterthan", "gt"},
    };
    for (auto [alias, name_of] : aliases) {
        if (alias == name) return name_of;
    }
    return name;
}

// The sandbox's cap on range() (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value range_fn(const Args& a) {
    ArgReader r(a, "range", {"start", "stop", "step"});
    int64_t start = 0, stop = 0, step = r.integer(2, 1);
    if (r.get(1)) start = r.integer(0, 0), stop = r.integer(1, 0);
    else stop = r.integer(0, 0);
    if (step == 0) fail("jinja: range() step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) fail("jinja: range() is limited to {} items", kMaxRange);
        out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
}

// dict(mapping?, **kwargs) and namespace(mapping?, **kwargs): the entries of both.
std::vector<std::pair<Value, Value>> entries(const Args& a, const char* callee) {
    if (a.pos.size() > 1 || (a.pos.size() == 1 && !a.pos[0].is_dict())) fail("jinja: {} takes one mapping and keyword arguments", callee);
    std::vector<std::pair<Value, Value>> out;
    if (!a.pos.empty()) out = a.pos[0].dict().items;
    for (const auto& [k, v] : a.kw) out.emplace_back(Value::text(k), v);
    return out;
}

Value dict_fn(const Args& a) {
    Dict d;
    for (auto& [k, v] : entries(a, "dict")) {
        auto same = [&](const auto& kv) { return equal(kv.first, k); };
        if (auto it = std::find_if(d.items.begin(), d.items.end(), same); it != d.items.end()) it->second = v;
        else d.items.emplace_back(k, v);
    }
    return Value::dict(std::move(d));
}

Value namespace_fn(const Args& a) {
    Namespace ns;
    for (auto& [k, v] : entries(a, "namespace")) {
        if (!k.is_str()) fail("jinja: namespace() attribute names must be strings");
        if (Value* old = ns.find(k.str().text)) *old = v;
        else ns.attrs.emplace_back(k.str().text, v);
    }
    return Value::ns(std::move(ns));
}

Value raise_exception_fn(const Args& a) {
    ArgReader r(a, "raise_exception", {"message"});
    throw Error(r.get(0) ? r.get(0)->to_str().text : "raise_exception()");
}

// joiner(sep): a function that returns "" the first time and sep after.
Value joiner_fn(const Args& a) {
    ArgReader r(a, "joiner", {"sep"});
    LStr sep = r.get(0) ? r.get(0)->to_str() : LStr(", ");
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](const Args&) {
        return Value::string(std::exchange(*used, true) ? sep : LStr());
    });
}

std::string strftime(const std::string& format, const std::tm& t) {
    if (format.empty()) return "";
    std::string buf(256, '\0');
    for (int tries = 0; tries < 4; ++tries, buf.resize(buf.size() * 4)) {
        if (size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &t)) return buf.substr(0, n);
    }
    fail("jinja: strftime_now: the format '{}' gives no or too much text", format);
}

}  // namespace

bool apply_test(std::string_view name, const Value& input, const Args& args) {
    auto it = tests().find(canonical_test(name));
    if (it == tests().end()) fail("jinja: unknown test '{}'", name);
    return it->second(input, args);
}

void add_globals(std::vector<std::pair<std::string, Value>>& out, std::optional<std::tm> now) {
    out.emplace_back("range", Value::function("range", range_fn));
    out.emplace_back("dict", Value::function("dict", dict_fn));
    out.emplace_back("namespace", Value::function("namespace", namespace_fn));
    out.emplace_back("joiner", Value::function("joiner", joiner_fn));
    out.emplace_back("raise_exception", Value::function("raise_exception", raise_exception_fn));
    out.emplace_back("strftime_now", Value::function("strftime_now", [now](const Args& a) {
        ArgReader r(a, "strftime_now", {"format"});
        std::tm t{};
        if (now) {
            t = *now;
        } else {
            std::time_t clock = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
            localtime_r(&clock, &t);
        }
        return Value::text(strftime(r.str(0, ""), t));
    }));
}

}  // namespace strata::jinja
