// Attribute and item lookup, and the Python methods of str, list and dict that chat
// templates call (content.split('</think>'), message.get('x'), tools.items()...).
// Substring results keep their literal ranges exactly; case changes are ASCII-only, so
// they keep every byte's position and its ranges too.
#include <algorithm>
#include <cctype>

#include "engine/core/error.h"
#include "engine/text/jinja/builtins.h"

namespace strata::jinja {

ArgReader::ArgReader(const Args& args, std::string_view callee, std::initializer_list<std::string_view> params)
    : callee_(callee), vals_(params.size(), nullptr) {
    if (args.pos.size() > params.size()) {
        fail("jinja: {} takes at most {} arguments, {} given", callee, params.size(), args.pos.size());
    }
    for (size_t i = 0; i < args.pos.size(); ++i) vals_[i] = &args.pos[i];
    for (const auto& [name, value] : args.kw) {
        auto it = std::find(params.begin(), params.end(), name);
        if (it == params.end()) fail("jinja: {} got an unexpected keyword argument '{}'", callee, name);
        size_t i = it - params.begin();
        if (vals_[i]) fail("jinja: {} got multiple values for argument '{}'", callee, name);
        vals_[i] = &value;
    }
}

std::string ArgReader::str(size_t i, std::string def) const {
    const Value* v = get(i);
    if (!v || v->is_none()) return def;
    if (!v->is_str()) fail("jinja: {}: argument {} must be a string, not '{}'", callee_, i + 1, v->type_name());
    return v->str().text;
}

int64_t ArgReader::integer(size_t i, int64_t def) const {
    const Value* v = get(i);
    if (!v || v->is_none()) return def;
    if (!v->is_int() && !v->is_bool()) fail("jinja: {}: argument {} must be an integer, not '{}'", callee_, i + 1, v->type_name());
    return v->as_int();
}

namespace {

bool is_py_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f'); }

// The code point of s starting at byte i, as a view.
std::string_view code_point_at(std::string_view s, size_t i) {
    size_t e = i + 1;
    while (e < s.size() && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    return s.substr(i, e - i);
}

// Python's str.split / rsplit: byte spans of the parts. sep null: runs of whitespace.
std::vector<Range> split_spans(std::string_view s, const std::string* sep, int64_t maxsplit, bool from_right) {
    std::vector<Range> parts;
    if (sep && sep->empty()) fail("jinja: split: empty separator");
    if (!sep) {
        // Words between whitespace runs; past maxsplit, the rest stays whole, with the
        // whitespace at its far end (Python's rule).
        std::vector<Range> words;
        for (size_t i = 0; i < s.size();) {
            while (i < s.size() && is_py_space(s[i])) ++i;
            size_t b = i;
            while (i < s.size() && !is_py_space(s[i])) ++i;
            if (b < i) words.push_back({b, i});
        }
        if (maxsplit < 0 || words.size() <= static_cast<size_t>(maxsplit) + 1) return words;
        size_t k = static_cast<size_t>(maxsplit);
        if (!from_right) {
            parts.assign(words.begin(), words.begin() + k);
            parts.push_back({words[k].first, s.size()});
        } else {
            size_t first = words.size() - k;
            parts.push_back({0, words[first - 1].second});
            parts.insert(parts.end(), words.begin() + first, words.end());
        }
        return parts;
    }
    size_t n = sep->size();
    if (!from_right) {
        size_t b = 0;
        for (size_t p; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) && (p = s.find(*sep, b)) != s.npos; b = p + n) {
            parts.push_back({b, p});
        }
        parts.push_back({b, s.size()});
        return parts;
    }
    size_t e = s.size();
    for (size_t p; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) && e >= n && (p = s.rfind(*sep, e - n)) != s.npos; e = p) {
        parts.push_back({p + n, e});
    }
    parts.push_back({0, e});
    std::reverse(parts.begin(), parts.end());
    return parts;
}

Value substr_list(const LStr& s, const std::vector<Range>& spans) {
    List out;
    out.reserve(spans.size());
    for (auto [b, e] : spans) out.push_back(Value::string(s.substr(b, e - b)));
    return Value::list(std::move(out));
}

std::string ascii_case(std::string s, int (*f)(int)) {
    for (char& c : s) {
        if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(f(c));
    }
    return s;
}

// Python's str.title: a letter after a letter is lowered, any other raised. Bytes of
// non-ASCII characters count as letters (they are unchanged: ASCII-only case mapping).
std::string py_title(std::string s) {
    bool prev_letter = false;
    for (char& c : s) {
        auto u = static_cast<unsigned char>(c);
        bool letter = std::isalpha(u) || u >= 0x80;
        if (u < 0x80 && letter) c = static_cast<char>(prev_letter ? std::tolower(u) : std::toupper(u));
        prev_letter = letter;
    }
    return s;
}

std::string py_capitalize(std::string s) {
    s = ascii_case(std::move(s), [](int c) { return std::tolower(c); });
    if (!s.empty() && static_cast<unsigned char>(s[0]) < 0x80) s[0] = static_cast<char>(std::toupper(s[0]));
    return s;
}

bool all_chars(std::string_view s, int (*pred)(int)) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
}

// prefix may be a str or a tuple (list) of them, as str.startswith takes.
bool affix_match(const Value& affix, std::string_view s, bool prefix) {
    if (affix.is_list()) {
        return std::any_of(affix.list().begin(), affix.list().end(), [&](const Value& a) { return affix_match(a, s, prefix); });
    }
    if (!affix.is_str()) fail("jinja: {}with: argument must be a str or tuple, not '{}'", prefix ? "starts" : "ends", affix.type_name());
    return prefix ? s.starts_with(affix.str().text) : s.ends_with(affix.str().text);
}

Value count_of(std::string_view s, std::string_view sub) {
    if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_count(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != s.npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::integer(n);
}

Value find_of(std::string_view s, std::string_view sub, bool from_right, bool must) {
    size_t p = from_right ? s.rfind(sub) : s.find(sub);
    if (p == s.npos) {
        if (must) fail("jinja: substring not found");
        return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(code_point_count(s.substr(0, p))));
}

Value replace(const LStr& s, const std::string& old, const LStr& with, int64_t count) {
    std::string out;
    size_t b = 0;
    int64_t done = 0;
    if (old.empty()) fail("jinja: replace: an empty 'old' is not supported");
    for (size_t p; (count < 0 || done < count) && (p = s.text.find(old, b)) != s.text.npos; b = p + old.size(), ++done) {
        out.append(s.text, b, p - b);
        out += with.text;
        check_text_size(out.size());
    }
    out.append(s.text, b);
    // Where the replacement bytes land is not followed: literal as a whole if either was.
    return Value::string(with.any_literal() ? LStr::from_data(std::move(out)) : s.derived(std::move(out)));
}

Value join_with(const LStr& sep, const Value& items) {
    LStr out;
    bool first = true;
    auto add = [&](const LStr& s) {
        if (!first) out.append(sep);
        out.append(s);
        check_text_size(out.text.size());
        first = false;
    };
    if (items.is_list()) {
        for (const auto& v : items.list()) {
            if (!v.is_str()) fail("jinja: join: expected str items, got '{}'", v.type_name());
            add(v.str());
        }
    } else if (items.is_str()) {
        auto off = code_point_offsets(items.str().text);
        for (size_t i = 0; i + 1 < off.size(); ++i) add(items.str().substr(off[i], off[i + 1] - off[i]));
    } else {
        fail("jinja: join: can only join an iterable, not '{}'", items.type_name());
    }
    return Value::string(std::move(out));
}

Value str_method(const Value& obj, std::string_view name, const Args& a) {
    const LStr& s = obj.str();
    std::string callee = fmt::format("str.{}", name);
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        ArgReader r(a, callee, {"chars"});
        std::string chars = r.str(0, "");
        bool given = r.get(0) && !r.get(0)->is_none();
        return Value::string(py_strip(s, given ? &chars : nullptr, name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        ArgReader r(a, callee, {"sep", "maxsplit"});
        std::string sep = r.str(0, "");
        bool given = r.get(0) && !r.get(0)->is_none();
        return substr_list(s, split_spans(s.text, given ? &sep : nullptr, r.integer(1, -1), name == "rsplit"));
    }
    if (name == "startswith" || name == "endswith") {
        ArgReader r(a, callee, {"prefix"});
        if (!r.get(0)) fail("jinja: {} takes one argument", callee);
        return Value::boolean(affix_match(*r.get(0), s.text, name == "startswith"));
    }
    if (name == "splitlines") {
        ArgReader r(a, callee, {});
        std::vector<Range> spans;
        for (size_t b = 0; b < s.text.size();) {
            size_t e = s.text.find('\n', b);
            if (e == s.text.npos) e = s.text.size();
            spans.push_back({b, e > b && s.text[e - 1] == '\r' ? e - 1 : e});
            b = e + 1;
        }
        return substr_list(s, spans);
    }
    if (name == "upper") return Value::string(s.same_shape(ascii_case(s.text, [](int c) { return std::toupper(c); })));
    if (name == "lower") return Value::string(s.same_shape(ascii_case(s.text, [](int c) { return std::tolower(c); })));
    if (name == "title") return Value::string(s.same_shape(py_title(s.text)));
    if (name == "capitalize") return Value::string(s.same_shape(py_capitalize(s.text)));
    if (name == "isdigit") return Value::boolean(all_chars(s.text, [](int c) { return std::isdigit(c); }));
    if (name == "isalpha") return Value::boolean(all_chars(s.text, [](int c) { return std::isalpha(c); }));
    if (name == "isalnum") return Value::boolean(all_chars(s.text, [](int c) { return std::isalnum(c); }));
    if (name == "isspace") return Value::boolean(all_chars(s.text, [](int c) { return int(is_py_space(char(c))); }));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
        ArgReader r(a, callee, {"sub"});
        std::string sub = r.str(0, "");
        if (name == "count") return count_of(s.text, sub);
        return find_of(s.text, sub, name[0] == 'r', name.ends_with("index"));
    }
    if (name == "replace") {
        ArgReader r(a, callee, {"old", "new", "count"});
        if (!r.get(1) || !r.get(1)->is_str()) fail("jinja: {} takes two str arguments", callee);
        return replace(s, r.str(0, ""), r.get(1)->str(), r.integer(2, -1));
    }
    if (name == "join") {
        ArgReader r(a, callee, {"iterable"});
        if (!r.get(0)) fail("jinja: {} takes one argument", callee);
        return join_with(s, *r.get(0));
    }
    fail("jinja: str has no method '{}'", name);
}

Value list_method(const Value& obj, std::string_view name, const Args& a) {
    ArgReader r(a, fmt::format("list.{}", name), {"value"});
    if (!r.get(0)) fail("jinja: list.{} takes one argument", name);
    const List& l = obj.list();
    auto it = std::find_if(l.begin(), l.end(), [&](const Value& v) { return equal(v, *r.get(0)); });
    if (name == "count") return Value::integer(std::count_if(l.begin(), l.end(), [&](const Value& v) { return equal(v, *r.get(0)); }));
    if (it == l.end()) fail("jinja: list.index: value not in list");
    return Value::integer(it - l.begin());
}

Value dict_method(const Value& obj, std::string_view name, const Args& a) {
    const Dict& d = obj.dict();
    if (name == "get") {
        ArgReader r(a, "dict.get", {"key", "default"});
        if (!r.get(0)) fail("jinja: dict.get takes a key");
        const Value* v = d.find(*r.get(0));
        return v ? *v : r.get_or(1, Value::none());
    }
    ArgReader(a, fmt::format("dict.{}", name), {});
    List out;
    out.reserve(d.items.size());
    for (const auto& [k, v] : d.items) {
        if (name == "items") out.push_back(Value::tuple({k, v}));
        else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
}

bool has_method(const Value& obj, std::string_view name) {
    static constexpr std::string_view str_methods[] = {
        "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "splitlines", "upper",
        "lower", "title", "capitalize", "isdigit", "isalpha", "isalnum", "isspace", "find", "rfind",
        "index", "rindex", "count", "replace", "join"};
    static constexpr std::string_view list_methods[] = {"index", "count"};
    static constexpr std::string_view dict_methods[] = {"get", "items", "keys", "values"};
    auto in = [&](const auto& names) { return std::find(std::begin(names), std::end(names), name) != std::end(names); };
    return (obj.is_str() && in(str_methods)) || (obj.is_list() && in(list_methods)) || (obj.is_dict() && in(dict_methods));
}

[[noreturn]] void undefined_read(std::string_view what) {
    fail("jinja: cannot read {} of an undefined value", what);
}

}  // namespace

LStr py_strip(const LStr& s, const std::string* chars, bool left, bool right) {
    std::string_view t = s.text;
    auto strips = [&](std::string_view cp) {
        if (!chars) return cp.size() == 1 && is_py_space(cp[0]);
        return chars->find(cp) != std::string::npos && cp.size() > 0;
    };
    size_t b = 0, e = t.size();
    while (left && b < e && strips(code_point_at(t, b))) b += code_point_at(t, b).size();
    while (right && e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(t[start]) & 0xC0) == 0x80) --start;
        if (!strips(t.substr(start, e - start))) break;
        e = start;
    }
    return s.substr(b, e - b);
}

Value method(const Value& obj, std::string_view name) {
    if (!has_method(obj, name)) return Value();
    std::string n(name);
    return Value::function(n, [obj, n](const Args& a) {
        if (obj.is_str()) return str_method(obj, n, a);
        if (obj.is_list()) return list_method(obj, n, a);
        return dict_method(obj, n, a);
    });
}

Value get_attr(const Value& obj, std::string_view name) {
    if (obj.is_undefined()) undefined_read(fmt::format("attribute '{}'", name));
    // Python attributes come first (jinja2's getattr), so d.items is the method even when
    // d has an "items" key; the template then writes d['items'].
    if (Value m = method(obj, name); !m.is_undefined()) return m;
    if (obj.is_dict()) {
        const Value* v = obj.dict().find(name);
        return v ? *v : Value();
    }
    if (obj.is_ns()) {
        const Value* v = obj.ns().find(name);
        return v ? *v : Value();
    }
    return Value();
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) undefined_read("an item");
    if (obj.is_dict()) {
        if (const Value* v = obj.dict().find(key)) return *v;
    } else if ((obj.is_list() || obj.is_str()) && (key.is_int() || key.is_bool())) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
            int64_t n = static_cast<int64_t>(obj.list().size());
            if (i < 0) i += n;
            return i >= 0 && i < n ? obj.list()[i] : Value();
        }
        auto off = code_point_offsets(obj.str().text);
        int64_t n = static_cast<int64_t>(off.size()) - 1;
        if (i < 0) i += n;
        return i >= 0 && i < n ? Value::string(obj.str().substr(off[i], off[i + 1] - off[i])) : Value();
    }
    return key.is_str() ? get_attr(obj, key.str().text) : Value();
}

Value get_path(const Value& obj, std::string_view path) {
    Value v = obj;
    for (size_t b = 0; b <= path.size();) {
        size_t e = std::min(path.find('.', b), path.size());
        std::string_view part = path.substr(b, e - b);
        bool digits = !part.empty() && part.size() <= 18 && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        v = digits ? get_item(v, Value::integer(std::stoll(std::string(part)))) : get_item(v, Value::text(std::string(part)));
        if (v.is_undefined()) return v;
        b = e + 1;
    }
    return v;
}

}  // namespace strata::jinja
