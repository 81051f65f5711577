#include "engine/text/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace strata::jinja {

const Value* Dict::find(const Value& key) const {
    for (const auto& [k, v] : items) {
        if (equal(k, key)) return &v;
    }
    return nullptr;
}

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items) {
        if (k.is_str() && k.str().text == key) return &v;
    }
    return nullptr;
}

Value* Namespace::find(std::string_view name) {
    for (auto& [k, v] : attrs) {
        if (k == name) return &v;
    }
    return nullptr;
}

Value Value::function(std::string name, std::function<Value(const Args&)> fn) {
    return Value(Data(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)})));
}

namespace {

template <class Json>
Value json_value(const Json& j) {
    switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
        auto u = j.template get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) fail("jinja: integer {} is too large", u);
        return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::real(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::string(LStr::from_data(j.template get<std::string>()));
    case nlohmann::json::value_t::array: {
        List l;
        l.reserve(j.size());
        for (const auto& e : j) l.push_back(json_value(e));
        return Value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
        Dict d;
        d.items.reserve(j.size());
        for (const auto& [k, v] : j.items()) d.items.emplace_back(Value::string(LStr::from_data(k)), json_value(v));
        return Value::dict(std::move(d));
    }
    default: fail("jinja: unsupported JSON value of type {}", j.type_name());
    }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return json_value(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return json_value(j); }

Value Value::tuple(List l) {
    Value v = list(std::move(l));
    v.tuple_ = true;
    return v;
}

int64_t Value::as_int() const { return is_bool() ? as_bool() : std::get<int64_t>(v_); }

double Value::as_float() const {
    return is_float() ? std::get<double>(v_) : static_cast<double>(as_int());
}

const char* Value::type_name() const {
    static constexpr const char* names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                            "list", "dict", "Namespace", "function"};
    return names[v_.index()];
}

bool Value::truthy() const {
    switch (v_.index()) {
    case 0:
    case 1: return false;
    case 2: return as_bool();
    case 3: return as_int() != 0;
    case 4: return as_float() != 0;
    case 5: return !str().text.empty();
    case 6: return !list().empty();
    case 7: return !dict().items.empty();
    default: return true;
    }
}

bool Value::has_literal() const {
    if (is_str()) return str().any_literal();
    if (is_list()) return std::any_of(list().begin(), list().end(), [](const Value& v) { return v.has_literal(); });
    if (is_dict()) {
        return std::any_of(dict().items.begin(), dict().items.end(),
                           [](const auto& kv) { return kv.first.has_literal() || kv.second.has_literal(); });
    }
    return false;
}

LStr Value::to_str() const {
    if (is_str()) return str();
    if (is_undefined()) return LStr();
    LStr out(repr());
    return has_literal() ? LStr::from_data(std::move(out.text)) : out;
}

std::string Value::repr() const {
    std::string s;
    repr_into(s);
    return s;
}

void Value::repr_into(std::string& out) const {
    check_text_size(out.size());
    switch (v_.index()) {
    case 0: return;
    case 1: out += "None"; return;
    case 2: out += as_bool() ? "True" : "False"; return;
    case 3: out += std::to_string(as_int()); return;
    case 4: out += float_repr(as_float()); return;
    case 5: out += string_repr(str().text); return;
    case 6:
        out += tuple_ ? "(" : "[";
        for (size_t i = 0; i < list().size(); ++i) {
            if (i) out += ", ";
            list()[i].repr_into(out);
        }
        out += !tuple_ ? "]" : list().size() == 1 ? ",)" : ")";
        return;
    case 7:
        out += "{";
        for (size_t i = 0; i < dict().items.size(); ++i) {
            if (i) out += ", ";
            dict().items[i].first.repr_into(out);
            out += ": ";
            dict().items[i].second.repr_into(out);
        }
        out += "}";
        return;
    case 8: {
        Dict d;
        for (const auto& [k, v] : ns().attrs) d.items.emplace_back(text(k), v);
        out += "<Namespace ";
        dict(std::move(d)).repr_into(out);
        out += ">";
        return;
    }
    default: out += "<function " + callable().name + ">";
    }
}

void check_text_size(size_t bytes) {
    if (bytes > kMaxTextBytes) fail("jinja: a value grew past {} bytes", kMaxTextBytes);
}

namespace {

// `seen`: the lists and dicts already walked; parts are shared, and walking each once
// keeps this linear in what the template built.
bool holds_namespace(const Value& v, std::unordered_set<const void*>& seen) {
    if (v.is_ns()) return true;
    if (v.is_list() && seen.insert(&v.list()).second) {
        return std::any_of(v.list().begin(), v.list().end(), [&](const Value& x) { return holds_namespace(x, seen); });
    }
    if (v.is_dict() && seen.insert(&v.dict()).second) {
        return std::any_of(v.dict().items.begin(), v.dict().items.end(), [&](const auto& kv) {
            return holds_namespace(kv.first, seen) || holds_namespace(kv.second, seen);
        });
    }
    return false;
}

}  // namespace

bool holds_namespace(const Value& v) {
    std::unordered_set<const void*> seen;
    return holds_namespace(v, seen);
}

bool equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.is_str() && b.is_str()) return a.str().text == b.str().text;
    if (a.is_list() && b.is_list()) {
        if (a.is_tuple() != b.is_tuple()) return false;
        if (&a.list() == &b.list()) return true;  // shared: as Python's identity shortcut
        return std::equal(a.list().begin(), a.list().end(), b.list().begin(), b.list().end(), equal);
    }
    if (a.is_dict() && b.is_dict()) {
        if (a.dict().items.size() != b.dict().items.size()) return false;
        return std::all_of(a.dict().items.begin(), a.dict().items.end(), [&](const auto& kv) {
            const Value* other = b.dict().find(kv.first);
            return other && equal(kv.second, *other);
        });
    }
    if (a.is_none() || a.is_undefined()) return a.is_none() == b.is_none() && a.is_undefined() == b.is_undefined();
    if (a.is_ns() && b.is_ns()) return &a.ns() == &b.ns();
    if (a.is_callable() && b.is_callable()) return &a.callable() == &b.callable();
    return false;
}

int compare(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
        return a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float();
    }
    // UTF-8 byte order is code point order, which is Python's.
    if (a.is_str() && b.is_str()) return a.str().text.compare(b.str().text) < 0 ? -1 : a.str().text != b.str().text;
    if (a.is_list() && b.is_list()) {
        size_t n = std::min(a.list().size(), b.list().size());
        for (size_t i = 0; i < n; ++i) {
            if (int c = compare(a.list()[i], b.list()[i])) return c;
        }
        return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size();
    }
    fail("jinja: cannot order '{}' and '{}'", a.type_name(), b.type_name());
}

std::string float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    // fmt's shortest round-trip form switches to exponents where Python's repr does
    // (below 1e-4, from 1e16); Python marks an integral float with ".0".
    std::string s = fmt::format("{}", d);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

std::string string_repr(std::string_view s) {
    char quote = s.find('\'') != s.npos && s.find('"') == s.npos ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
        auto u = static_cast<unsigned char>(c);
        if (c == quote || c == '\\') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (u < 0x20 || u == 0x7f) {
            out += fmt::format("\\x{:02x}", u);
        } else {
            out += c;
        }
    }
    return out + quote;
}

}  // namespace strata::jinja
