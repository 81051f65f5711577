// The filters (`value | name(args)`) of jinja2 3.1 that chat templates use, with
// transformers' tojson. Text in, text out keeps literal ranges where the bytes are
// followed (trim, join, first...), and is literal as a whole where they are not
// (tojson, indent, replace) whenever any input byte was.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"

namespace strata::jinja {
namespace {

using FilterFn = Value (*)(const Value& in, const Args& a);

std::string lowered(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// The sort key of filters with case_sensitive= and attribute= parameters.
Value sort_key(const Value& v, const std::string& attribute, bool case_sensitive) {
    Value k = attribute.empty() ? v : get_path(v, attribute);
    return !case_sensitive && k.is_str() ? Value::text(lowered(k.str().text)) : k;
}

List sorted(List items, const std::string& attribute, bool case_sensitive, bool reverse) {
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& v : items) keyed.emplace_back(sort_key(v, attribute, case_sensitive), std::move(v));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    List out;
    for (auto& kv : keyed) out.push_back(std::move(kv.second));
    return out;
}

Value f_trim(const Value& in, const Args& a) {
    ArgReader r(a, "trim", {"chars"});
    std::string chars = r.str(0, "");
    return Value::string(py_strip(in.to_str(), r.get(0) && !r.get(0)->is_none() ? &chars : nullptr, true, true));
}

Value f_length(const Value& in, const Args& a) {
    ArgReader(a, "length", {});
    if (in.is_str()) return Value::integer(static_cast<int64_t>(code_point_count(in.str().text)));
    if (in.is_list()) return Value::integer(static_cast<int64_t>(in.list().size()));
    if (in.is_dict()) return Value::integer(static_cast<int64_t>(in.dict().items.size()));
    if (in.is_undefined()) return Value::integer(0);
    fail("jinja: object of type '{}' has no length", in.type_name());
}

Value f_first(const Value& in, const Args& a) {
    ArgReader(a, "first", {});
    List items = iterate(in);
    return items.empty() ? Value() : items.front();
}

Value f_last(const Value& in, const Args& a) {
    ArgReader(a, "last", {});
    List items = iterate(in);
    return items.empty() ? Value() : items.back();
}

Value f_default(const Value& in, const Args& a) {
    ArgReader r(a, "default", {"default_value", "boolean"});
    bool replace = in.is_undefined() || (r.boolean(1, false) && !in.truthy());
    return replace ? r.get_or(0, Value::text("")) : in;
}

Value f_join(const Value& in, const Args& a) {
    ArgReader r(a, "join", {"d", "attribute"});
    LStr sep = r.get(0) ? r.get(0)->to_str() : LStr();
    std::string attribute = r.str(1, "");
    LStr out;
    bool first = true;
    for (const auto& v : iterate(in)) {
        if (!first) out.append(sep);
        out.append((attribute.empty() ? v : get_path(v, attribute)).to_str());
        check_text_size(out.text.size());
        first = false;
    }
    return Value::string(std::move(out));
}

Value f_list(const Value& in, const Args& a) {
    ArgReader(a, "list", {});
    return Value::list(iterate(in));
}

Value f_string(const Value& in, const Args& a) {
    ArgReader(a, "string", {});
    return Value::string(in.to_str());
}

// Python's int(str): optional sign, digits (underscores between them), outer whitespace.
bool parse_int(std::string_view s, int64_t base, int64_t& out) {
    LStr t = py_strip(LStr(std::string(s)), nullptr, true, true);
    std::string digits;
    for (char c : t.text) {
        if (c != '_') digits += c;
    }
    if (digits.empty() || digits.back() == '+' || digits.back() == '-') return false;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (errno != 0 || *end != '\0' || std::isspace(static_cast<unsigned char>(digits[0]))) return false;
    out = v;
    return true;
}

bool parse_float(std::string_view s, double& out) {
    LStr t = py_strip(LStr(std::string(s)), nullptr, true, true);
    if (t.text.empty()) return false;
    char* end = nullptr;
    out = std::strtod(t.text.c_str(), &end);
    return *end == '\0';
}

Value f_int(const Value& in, const Args& a) {
    ArgReader r(a, "int", {"default", "base"});
    Value def = r.get_or(0, Value::integer(0));
    if (in.is_int() || in.is_bool()) return Value::integer(in.as_int());
    if (in.is_float()) {
        double d = in.as_float();
        return std::isfinite(d) && std::fabs(d) < 9.2e18 ? Value::integer(static_cast<int64_t>(d)) : def;
    }
    if (!in.is_str()) return def;
    int64_t i;
    double d;
    if (parse_int(in.str().text, r.integer(1, 10), i)) return Value::integer(i);
    if (parse_float(in.str().text, d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
    return def;
}

Value f_float(const Value& in, const Args& a) {
    ArgReader r(a, "float", {"default"});
    if (in.is_number()) return Value::real(in.as_float());
    double d;
    if (in.is_str() && parse_float(in.str().text, d)) return Value::real(d);
    return r.get_or(0, Value::real(0.0));
}

// transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(const Value& in, const Args& a) {
    ArgReader r(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle style;
    style.ensure_ascii = r.boolean(0, false);
    if (const Value* ind = r.get(1); ind && !ind->is_none()) {
        if (ind->is_str()) style.indent = ind->str().text;
        else style.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(r.integer(1, 0), 0, 64)), ' ');
    }
    if (const Value* sep = r.get(2); sep && !sep->is_none()) {
        if (!sep->is_list() || sep->list().size() != 2 || !sep->list()[0].is_str() || !sep->list()[1].is_str()) {
            fail("jinja: tojson: separators must be a pair of strings");
        }
        style.item_sep = sep->list()[0].str().text;
        style.key_sep = sep->list()[1].str().text;
    }
    style.sort_keys = r.boolean(3, false);
    std::string json = to_json(in, style);
    return Value::string(in.has_literal() ? LStr::from_data(std::move(json)) : LStr(std::move(json)));
}

Value f_items(const Value& in, const Args& a) {
    ArgReader(a, "items", {});
    if (in.is_undefined()) return Value::list({});
    if (!in.is_dict()) fail("jinja: items: expected a mapping, got '{}'", in.type_name());
    return method(in, "items").callable().fn({});
}

Value f_dictsort(const Value& in, const Args& a) {
    ArgReader r(a, "dictsort", {"case_sensitive", "by", "reverse"});
    if (!in.is_dict()) fail("jinja: dictsort: expected a mapping, got '{}'", in.type_name());
    std::string by = r.str(1, "key");
    if (by != "key" && by != "value") fail("jinja: dictsort: 'by' must be 'key' or 'value'");
    List pairs = method(in, "items").callable().fn({}).list();
    return Value::list(sorted(std::move(pairs), by == "key" ? "0" : "1", r.boolean(0, false), r.boolean(2, false)));
}

Value f_sort(const Value& in, const Args& a) {
    ArgReader r(a, "sort", {"reverse", "case_sensitive", "attribute"});
    return Value::list(sorted(iterate(in), r.str(2, ""), r.boolean(1, false), r.boolean(0, false)));
}

Value f_unique(const Value& in, const Args& a) {
    ArgReader r(a, "unique", {"case_sensitive", "attribute"});
    std::string attribute = r.str(1, "");
    List out, seen;
    for (auto& v : iterate(in)) {
        Value k = sort_key(v, attribute, r.boolean(0, false));
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, k); })) {
            seen.push_back(k);
            out.push_back(v);
        }
    }
    return Value::list(std::move(out));
}

Value extreme(const Value& in, const Args& a, bool want_max) {
    ArgReader r(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
    List items = iterate(in);
    if (items.empty()) return Value();
    std::string attribute = r.str(1, "");
    bool cs = r.boolean(0, false);
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
        int c = compare(sort_key(items[i], attribute, cs), sort_key(items[best], attribute, cs));
        if (want_max ? c > 0 : c < 0) best = i;
    }
    return items[best];
}
Value f_max(const Value& in, const Args& a) { return extreme(in, a, true); }
Value f_min(const Value& in, const Args& a) { return extreme(in, a, false); }

Value f_sum(const Value& in, const Args& a) {
    ArgReader r(a, "sum", {"attribute", "start"});
    std::string attribute = r.str(0, "");
    Value total = r.get_or(1, Value::integer(0));
    for (const auto& v : iterate(in)) total = binary_op(Op::Add, total, attribute.empty() ? v : get_path(v, attribute));
    return total;
}

Value f_reverse(const Value& in, const Args& a) {
    ArgReader(a, "reverse", {});
    List items = iterate(in);
    std::reverse(items.begin(), items.end());
    if (!in.is_str()) return Value::list(std::move(items));
    LStr out;
    for (const auto& c : items) out.append(c.str());
    return Value::string(std::move(out));
}

Value case_filter(const Value& in, const Args& a, const char* name) {
    ArgReader(a, name, {});
    Args none;
    return method(Value::string(in.to_str()), name).callable().fn(none);
}
Value f_lower(const Value& in, const Args& a) { return case_filter(in, a, "lower"); }
Value f_upper(const Value& in, const Args& a) { return case_filter(in, a, "upper"); }
Value f_capitalize(const Value& in, const Args& a) { return case_filter(in, a, "capitalize"); }

// jinja2's title filter, not str.title: a word starts after whitespace, '-', or an
// opening bracket, so "they're" stays "They're".
Value f_title(const Value& in, const Args& a) {
    ArgReader(a, "title", {});
    LStr s = in.to_str();
    std::string t = s.text;
    bool start = true;
    for (char& c : t) {
        auto u = static_cast<unsigned char>(c);
        bool boundary = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (u < 0x80 && !boundary) c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
        start = boundary;
    }
    return Value::string(s.same_shape(std::move(t)));
}

Value f_replace(const Value& in, const Args& a) {
    ArgReader r(a, "replace", {"old", "new", "count"});
    Args m;
    m.pos = {r.get_or(0, Value()), r.get_or(1, Value())};
    if (r.get(2) && !r.get(2)->is_none()) m.pos.push_back(*r.get(2));
    return method(Value::string(in.to_str()), "replace").callable().fn(m);
}

Value f_safe(const Value& in, const Args& a) {
    ArgReader(a, "safe", {});
    return in;
}

// jinja2 3.1's indent: every line but the first (unless first=True) gets the prefix,
// blank lines only with blank=True.
Value f_indent(const Value& in, const Args& a) {
    ArgReader r(a, "indent", {"width", "first", "blank"});
    const Value* w = r.get(0);
    std::string prefix = w && w->is_str() ? w->str().text : std::string(static_cast<size_t>(std::clamp<int64_t>(r.integer(0, 4), 0, 1024)), ' ');
    bool first = r.boolean(1, false), blank = r.boolean(2, false);
    LStr s = in.to_str();
    std::string out;
    std::string_view t = s.text;
    for (size_t b = 0, line = 0; b <= t.size(); ++line) {
        size_t e = std::min(t.find('\n', b), t.size());
        std::string_view text = t.substr(b, e - b);
        if ((line > 0 || first) && (blank || !text.empty())) out += prefix;
        out += text;
        if (e < t.size()) out += '\n';
        check_text_size(out.size());
        b = e + 1;
    }
    return Value::string(s.derived(std::move(out)));
}

Value f_abs(const Value& in, const Args& a) {
    ArgReader(a, "abs", {});
    if (in.is_float()) return Value::real(std::fabs(in.as_float()));
    if (!in.is_number()) fail("jinja: abs: bad operand type '{}'", in.type_name());
    return in.as_int() < 0 ? unary_op(Op::Neg, in) : Value::integer(in.as_int());
}

Value f_round(const Value& in, const Args& a) {
    ArgReader r(a, "round", {"precision", "method"});
    if (!in.is_number()) fail("jinja: round: expected a number, got '{}'", in.type_name());
    std::string how = r.str(1, "common");
    if (!in.is_float() && how == "common" && r.integer(0, 0) >= 0) return Value::integer(in.as_int());  // Python's round(int)
    double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(r.integer(0, 0), -20, 20)));
    double x = in.as_float() * scale;
    if (how == "common") x = std::nearbyint(x);  // Python's round: half to even
    else if (how == "ceil") x = std::ceil(x);
    else if (how == "floor") x = std::floor(x);
    else fail("jinja: round: method must be 'common', 'ceil' or 'floor'");
    return Value::real(x / scale);
}

Value f_batch(const Value& in, const Args& a) {
    ArgReader r(a, "batch", {"linecount", "fill_with"});
    int64_t n = r.integer(0, 0);
    if (n <= 0) fail("jinja: batch: linecount must be positive");
    List out, cur;
    for (auto& v : iterate(in)) {
        cur.push_back(std::move(v));
        if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::exchange(cur, {})));
    }
    if (!cur.empty()) {
        while (r.get(1) && !r.get(1)->is_none() && static_cast<int64_t>(cur.size()) < n) cur.push_back(*r.get(1));
        out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
}

// map('filter', args...) or map(attribute='a.b', default=...).
Value f_map(const Value& in, const Args& a) {
    List out;
    if (a.pos.empty()) {
        ArgReader r(a, "map", {"attribute", "default"});
        std::string attribute = r.str(0, "");
        if (attribute.empty()) fail("jinja: map needs a filter name or attribute=");
        for (const auto& v : iterate(in)) {
            Value x = get_path(v, attribute);
            out.push_back(x.is_undefined() && r.get(1) ? *r.get(1) : x);
        }
        return Value::list(std::move(out));
    }
    if (!a.pos[0].is_str()) fail("jinja: map: the filter name must be a string");
    Args rest{{a.pos.begin() + 1, a.pos.end()}, a.kw};
    for (const auto& v : iterate(in)) out.push_back(apply_filter(a.pos[0].str().text, v, rest));
    return Value::list(std::move(out));
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...);
// without a test, the value's truthiness.
Value select(const Value& in, const Args& a, bool by_attr, bool keep) {
    size_t k = 0;
    std::string attribute;
    if (by_attr) {
        if (a.pos.empty() || !a.pos[0].is_str()) fail("jinja: selectattr/rejectattr need an attribute name");
        attribute = a.pos[k++].str().text;
    }
    std::string test;
    if (k < a.pos.size()) {
        if (!a.pos[k].is_str()) fail("jinja: select: the test name must be a string");
        test = a.pos[k++].str().text;
    }
    Args rest{{a.pos.begin() + static_cast<ptrdiff_t>(k), a.pos.end()}, a.kw};
    List out;
    for (const auto& v : iterate(in)) {
        Value subject = by_attr ? get_path(v, attribute) : v;
        bool pass = test.empty() ? subject.truthy() : apply_test(test, subject, rest);
        if (pass == keep) out.push_back(v);
    }
    return Value::list(std::move(out));
}
Value f_select(const Value& in, const Args& a) { return select(in, a, false, true); }
Value f_reject(const Value& in, const Args& a) { return select(in, a, false, false); }
Value f_selectattr(const Value& in, const Args& a) { return select(in, a, true, true); }
Value f_rejectattr(const Value& in, const Args& a) { return select(in, a, true, false); }

const std::unordered_map<std::string_view, FilterFn>& filters() {
    static const std::unordered_map<std::string_view, FilterFn> table = {
        {"abs", f_abs},         {"batch", f_batch},       {"capitalize", f_capitalize}, {"count", f_length},
        {"d", f_default},       {"default", f_default},   {"dictsort", f_dictsort},     {"first", f_first},
        {"float", f_float},     {"indent", f_indent},     {"int", f_int},               {"items", f_items},
        {"join", f_join},       {"last", f_last},         {"length", f_length},         {"list", f_list},
        {"lower", f_lower},     {"map", f_map},           {"max", f_max},               {"min", f_min},
        {"reject", f_reject},   {"rejectattr", f_rejectattr}, {"replace", f_replace},   {"reverse", f_reverse},
        {"round", f_round},     {"safe", f_safe},         {"select", f_select},         {"selectattr", f_selectattr},
        {"sort", f_sort},       {"string", f_string},     {"sum", f_sum},               {"title", f_title},
        {"tojson", f_tojson},   {"trim", f_trim},         {"unique", f_unique},         {"upper", f_upper},
    };
    return table;
}

// ---------------------------------------------------------------- json.dumps

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        auto u = static_cast<unsigned char>(s[i]);
        switch (s[i]) {
        case '"': out += "\\\""; continue;
        case '\\': out += "\\\\"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\t': out += "\\t"; continue;
        case '\b': out += "\\b"; continue;
        case '\f': out += "\\f"; continue;
        default: break;
        }
        if (u < 0x20) {
            out += fmt::format("\\u{:04x}", u);
        } else if (u < 0x80 || !ensure_ascii) {
            out += s[i];
        } else {  // decode one code point; above the BMP, a surrogate pair as Python writes
            int n = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : 1;
            uint32_t cp = u & (0x3F >> n);
            for (int k = 0; k < n && i + 1 < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                out += fmt::format("\\u{:04x}", cp);
            }
        }
    }
    out += '"';
}

std::string json_key(const Value& k) {
    if (k.is_str()) return k.str().text;
    if (k.is_bool()) return k.as_bool() ? "true" : "false";
    if (k.is_none()) return "null";
    if (k.is_int() || k.is_float()) return k.repr();
    fail("jinja: tojson: keys must be str, int, float, bool or None, not '{}'", k.type_name());
}

class JsonWriter {
public:
    explicit JsonWriter(const JsonStyle& style)
        : s_(style), item_sep_(style.item_sep.value_or(style.indent ? "," : ", ")), key_sep_(style.key_sep.value_or(": ")) {}

    void write(const Value& v, int level) {
        check_text_size(out.size());
        if (v.is_none()) out += "null";
        else if (v.is_bool()) out += v.as_bool() ? "true" : "false";
        else if (v.is_int()) out += v.repr();
        else if (v.is_float()) out += float_json(v.as_float());
        else if (v.is_str()) json_string(out, v.str().text, s_.ensure_ascii);
        else if (v.is_list()) list(v.list(), level);
        else if (v.is_dict()) dict(v.dict(), level);
        else fail("jinja: tojson: object of type '{}' is not JSON serializable", v.type_name());
    }

    std::string out;

private:
    static std::string float_json(double d) {
        if (std::isnan(d)) return "NaN";
        if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
        return float_repr(d);
    }

    void newline(int level) {
        if (!s_.indent) return;
        out += '\n';
        for (int i = 0; i < level; ++i) out += *s_.indent;
    }

    void list(const List& l, int level) {
        if (l.empty()) return void(out += "[]");
        out += '[';
        for (size_t i = 0; i < l.size(); ++i) {
            if (i) out += item_sep_;
            newline(level + 1);
            write(l[i], level + 1);
        }
        newline(level);
        out += ']';
    }

    void dict(const Dict& d, int level) {
        if (d.items.empty()) return void(out += "{}");
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, v] : d.items) items.emplace_back(json_key(k), &v);
        if (s_.sort_keys) std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += item_sep_;
            newline(level + 1);
            json_string(out, items[i].first, s_.ensure_ascii);
            out += key_sep_;
            write(*items[i].second, level + 1);
        }
        newline(level);
        out += '}';
    }

    const JsonStyle& s_;
    std::string item_sep_, key_sep_;
};

}  // namespace

List iterate(const Value& v) {
    if (v.is_list()) return v.list();
    if (v.is_undefined()) return {};
    List out;
    if (v.is_dict()) {
        for (const auto& kv : v.dict().items) out.push_back(kv.first);
    } else if (v.is_str()) {
        auto off = code_point_offsets(v.str().text);
        for (size_t i = 0; i + 1 < off.size(); ++i) out.push_back(Value::string(v.str().substr(off[i], off[i + 1] - off[i])));
    } else {
        fail("jinja: '{}' object is not iterable", v.type_name());
    }
    return out;
}

std::string to_json(const Value& v, const JsonStyle& style) {
    JsonWriter w(style);
    w.write(v, 0);
    return std::move(w.out);
}

Value apply_filter(std::string_view name, const Value& input, const Args& args) {
    auto it = filters().find(name);
    if (it == filters().end()) fail("jinja: unknown filter '{}'", name);
    return it->second(input, args);
}

}  // namespace strata::jinja
