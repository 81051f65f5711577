#include "engine/sample/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "engine/core/error.h"
#include "engine/sample/json_schema_parts.h"

namespace strata::schema {

namespace {

using json = nlohmann::ordered_json;  // keeps "properties" in the order written

constexpr int kMaxDepth = 64;          // nesting of schemas inside schemas
constexpr int64_t kMaxCount = 100000;  // minItems, maxLength, ...

enum class Applies { Any, Object, Array, String, Integer, Annotation };

const std::map<std::string, Applies, std::less<>>& keywords() {
    static const std::map<std::string, Applies, std::less<>> k = {
        {"type", Applies::Any}, {"enum", Applies::Any}, {"const", Applies::Any}, {"anyOf", Applies::Any},
        {"oneOf", Applies::Any}, {"allOf", Applies::Any}, {"$ref", Applies::Any}, {"$defs", Applies::Any},
        {"definitions", Applies::Any},
        {"properties", Applies::Object}, {"required", Applies::Object}, {"additionalProperties", Applies::Object},
        {"items", Applies::Array}, {"prefixItems", Applies::Array}, {"minItems", Applies::Array},
        {"maxItems", Applies::Array},
        {"minLength", Applies::String}, {"maxLength", Applies::String}, {"pattern", Applies::String},
        {"format", Applies::String},
        {"minimum", Applies::Integer}, {"maximum", Applies::Integer}, {"exclusiveMinimum", Applies::Integer},
        {"exclusiveMaximum", Applies::Integer},
        {"title", Applies::Annotation}, {"description", Applies::Annotation}, {"default", Applies::Annotation},
        {"examples", Applies::Annotation}, {"$schema", Applies::Annotation}, {"$id", Applies::Annotation},
        {"$comment", Applies::Annotation}, {"deprecated", Applies::Annotation}, {"readOnly", Applies::Annotation},
        {"writeOnly", Applies::Annotation},
    };
    return k;
}

Applies applies(const std::string& key) { return keywords().at(key); }

// Keys that only organize the document: they constrain nothing where they stand.
bool inert(const std::string& key) {
    return applies(key) == Applies::Annotation || key == "$defs" || key == "definitions";
}

const char* type_of_value(const json& v) {
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    if (v.is_string()) return "string";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_boolean()) return "boolean";
    return "null";
}

bool value_has_type(const json& v, const std::string& t) {
    const std::string vt = type_of_value(v);
    return vt == t || (t == "number" && vt == "integer");
}

}  // namespace

class SchemaCompiler {
public:
    explicit SchemaCompiler(const json& root) : root_(root) {}

    Grammar run() {
        const int32_t root = g_.rule("root");
        refs_["#"] = root;
        g_.define(root, value(root_, "root", 0));
        return std::move(g_);
    }

private:
    GrammarExpr value(const json& s, const std::string& path, int depth) {
        if (depth > kMaxDepth) fail("JSON schema: nested deeper than {} at {}", kMaxDepth, path);
        if (s.is_boolean()) {
            if (!s.get<bool>()) fail("JSON schema: the schema at {} is false: no value can match", path);
            return gram::ref(primitive(g_, "json-value"));
        }
        if (!s.is_object()) fail("JSON schema: the schema at {} must be an object or a boolean", path);
        for (const auto& [key, v] : s.items())
            if (!keywords().count(key)) fail("JSON schema: unsupported keyword '{}' at {}", key, path);
        if (s.contains("$ref")) return reference(s, path, depth);
        if (s.contains("allOf")) return value(merged_all_of(s, path), path, depth + 1);
        if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, path, depth);
        if (s.contains("enum") || s.contains("const")) return enumeration(s, path);
        const std::vector<std::string> types = types_of(s, path);
        if (types.empty()) return gram::ref(primitive(g_, "json-value"));
        check_applicable(s, types, path);
        std::vector<GrammarExpr> alts;
        for (const std::string& t : types) alts.push_back(typed(s, t, path, depth));
        return gram::alt(std::move(alts));
    }

    // Rule names from schema paths; only letters, digits and '-', made unique.
    std::string rule_name(const std::string& path) {
        std::string name;
        for (char c : path) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
        std::string unique = name;
        for (int n = 2; g_.find(unique); ++n) unique = fmt::format("{}-{}", name, n);
        return unique;
    }

    // "#/$defs/<name>" or "#/definitions/<name>" in the root document.
    const json& resolve(const std::string& ref, const std::string& path) const {
        for (const std::string section : {"$defs", "definitions"}) {
            const std::string prefix = "#/" + section + "/";
            if (ref.rfind(prefix, 0) != 0) continue;
            const std::string name = unescape_pointer(ref.substr(prefix.size()));
            if (!root_.contains(section) || !root_[section].contains(name))
                fail("JSON schema: $ref '{}' at {} names no definition", ref, path);
            return root_[section][name];
        }
        fail("JSON schema: $ref '{}' at {} is not supported (only \"#\", \"#/$defs/...\", \"#/definitions/...\")", ref, path);
    }

    // JSON pointer escapes: ~1 is '/', ~0 is '~'.
    static std::string unescape_pointer(const std::string& s) {
        std::string out;
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '~' && i + 1 < s.size() && (s[i + 1] == '0' || s[i + 1] == '1')) out += s[++i] == '1' ? '/' : '~';
            else out += s[i];
        }
        return out;
    }

    GrammarExpr reference(const json& s, const std::string& path, int depth) {
        for (const auto& [key, v] : s.items())
            if (key != "$ref" && !inert(key)) fail("JSON schema: '$ref' beside '{}' at {} is not supported", key, path);
        if (!s["$ref"].is_string()) fail("JSON schema: $ref at {} must be a string", path);
        const std::string ref = s["$ref"].get<std::string>();
        if (auto it = refs_.find(ref); it != refs_.end()) return gram::ref(it->second);
        const json& target = resolve(ref, path);
        // Declared before its body is compiled, so a recursive reference finds it.
        const int32_t rule = g_.rule(rule_name("def-" + ref.substr(ref.rfind('/') + 1)));
        refs_[ref] = rule;
        g_.define(rule, value(target, ref, depth + 1));
        return gram::ref(rule);
    }

    const json& dereferenced(const json& s, const std::string& path) const {
        if (s.is_object() && s.size() == 1 && s.contains("$ref") && s["$ref"].is_string()) {
            const std::string ref = s["$ref"].get<std::string>();
            return ref == "#" ? root_ : resolve(ref, path);
        }
        return s;
    }

    // base gains add's constraints: properties united (a property in both must agree),
    // required united; any other keyword in both must be equal.
    static void merge(json& base, const json& add, const std::string& path) {
        if (!add.is_object()) fail("JSON schema: allOf / anyOf members at {} must be objects", path);
        for (const auto& [key, v] : add.items()) {
            if (!keywords().count(key)) fail("JSON schema: unsupported keyword '{}' at {}", key, path);
            if (inert(key)) continue;
            if (key == "properties" && base.contains(key)) {
                for (const auto& [name, sub] : v.items()) {
                    if (base[key].contains(name) && base[key][name] != sub)
                        fail("JSON schema: property '{}' is defined differently in two merged schemas at {}", name, path);
                    base[key][name] = sub;
                }
            } else if (key == "required" && base.contains(key)) {
                for (const json& r : v)
                    if (std::find(base[key].begin(), base[key].end(), r) == base[key].end()) base[key].push_back(r);
            } else if (base.contains(key) && base[key] != v) {
                fail("JSON schema: '{}' differs between merged schemas at {} (not supported)", key, path);
            } else {
                base[key] = v;
            }
        }
    }

    json merged_all_of(const json& s, const std::string& path) const {
        if (!s["allOf"].is_array()) fail("JSON schema: allOf at {} must be an array", path);
        json base = s;
        base.erase("allOf");
        for (const json& member : s["allOf"]) merge(base, dereferenced(member, path), path + "/allOf");
        return base;
    }

    GrammarExpr any_of(const json& s, const std::string& path, int depth) {
        if (s.contains("anyOf") && s.contains("oneOf")) fail("JSON schema: anyOf and oneOf together at {}", path);
        const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
        if (!s[key].is_array() || s[key].empty()) fail("JSON schema: {} at {} must be a non-empty array", key, path);
        json siblings = json::object();
        for (const auto& [k, v] : s.items())
            if (k != key && !inert(k)) siblings[k] = v;
        std::vector<GrammarExpr> alts;
        for (size_t i = 0; i < s[key].size(); ++i) {
            const std::string branch_path = fmt::format("{}/{}/{}", path, key, i);
            const json& branch = s[key][i];
            if (siblings.empty()) {
                alts.push_back(value(branch, branch_path, depth + 1));
                continue;
            }
            json merged = siblings;
            merge(merged, dereferenced(branch, branch_path), branch_path);
            alts.push_back(value(merged, branch_path, depth + 1));
        }
        return gram::alt(std::move(alts));
    }

    GrammarExpr enumeration(const json& s, const std::string& path) {
        for (const auto& [key, v] : s.items())
            if (key != "enum" && key != "const" && key != "type" && !inert(key))
                fail("JSON schema: '{}' beside enum / const at {} is not supported", key, path);
        if (s.contains("enum") && s.contains("const")) fail("JSON schema: enum and const together at {}", path);
        const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
        if (!values.is_array() || values.empty()) fail("JSON schema: enum at {} must be a non-empty array", path);
        const std::vector<std::string> types = s.contains("type") ? types_of(s, path) : std::vector<std::string>{};
        std::vector<GrammarExpr> alts;
        for (const json& v : values) {
            const bool typed_ok = types.empty() || std::any_of(types.begin(), types.end(),
                                                               [&](const std::string& t) { return value_has_type(v, t); });
            if (typed_ok) alts.push_back(gram::lit(v.dump()));
        }
        if (alts.empty()) fail("JSON schema: no enum value at {} has the schema's type", path);
        return gram::alt(std::move(alts));
    }

    // The listed types, or the ones the keywords imply; empty: any value.
    std::vector<std::string> types_of(const json& s, const std::string& path) const {
        static const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
        std::vector<std::string> types;
        if (s.contains("type")) {
            const json& t = s["type"];
            for (const json& one : t.is_array() ? t : json::array({t})) {
                if (!one.is_string() || !kTypes.count(one.get<std::string>()))
                    fail("JSON schema: unknown type {} at {}", one.dump(), path);
                types.push_back(one.get<std::string>());
            }
            if (types.empty()) fail("JSON schema: empty type list at {}", path);
            return types;
        }
        std::set<Applies> implied;
        for (const auto& [key, v] : s.items()) implied.insert(applies(key));
        if (implied.count(Applies::Integer)) fail("JSON schema: numeric bounds at {} need \"type\": \"integer\"", path);
        if (implied.count(Applies::Object)) types.push_back("object");
        if (implied.count(Applies::Array)) types.push_back("array");
        if (implied.count(Applies::String)) types.push_back("string");
        return types;
    }

    static void check_applicable(const json& s, const std::vector<std::string>& types, const std::string& path) {
        const auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
        for (const auto& [key, v] : s.items()) {
            const Applies a = applies(key);
            const bool ok = a == Applies::Any || a == Applies::Annotation || (a == Applies::Object && has("object")) ||
                            (a == Applies::Array && has("array")) || (a == Applies::String && has("string")) ||
                            (a == Applies::Integer && has("integer") && !has("number"));
            if (ok) continue;
            if (a == Applies::Integer && has("number"))
                fail("JSON schema: '{}' at {} is supported for type integer only, not number", key, path);
            fail("JSON schema: '{}' at {} does not apply to type {}", key, path, fmt::join(types, " / "));
        }
    }

    GrammarExpr typed(const json& s, const std::string& t, const std::string& path, int depth) {
        if (t == "object") return object(s, path, depth);
        if (t == "array") return array(s, path, depth);
        if (t == "string") return string(s, path);
        if (t == "integer") return integer(s, path);
        if (t == "number") return gram::ref(primitive(g_, "json-number"));
        if (t == "boolean") return gram::ref(primitive(g_, "json-boolean"));
        return gram::ref(primitive(g_, "json-null"));
    }

    static int64_t count(const json& s, const char* key, int64_t fallback, const std::string& path) {
        if (!s.contains(key)) return fallback;
        const json& v = s[key];
        if (!v.is_number_integer() && !v.is_number_unsigned()) fail("JSON schema: {} at {} must be an integer", key, path);
        if (v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount)
            fail("JSON schema: {} at {} must be in [0, {}]", key, path, kMaxCount);
        return v.get<int64_t>();
    }

    GrammarExpr string(const json& s, const std::string& path) {
        const bool lengths = s.contains("minLength") || s.contains("maxLength");
        const GrammarExpr quote = gram::lit("\"");
        if (s.contains("format")) {
            const json& f = s["format"];
            if (!f.is_string() || !is_supported_format(f.get<std::string>()))
                fail("JSON schema: format {} at {} is not supported (date, time, date-time, uuid, email, ipv4)", f.dump(), path);
            if (lengths || s.contains("pattern")) fail("JSON schema: format with pattern or lengths at {} is not supported", path);
            return gram::seq({quote, gram::ref(primitive(g_, f.get<std::string>())), quote});
        }
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) fail("JSON schema: pattern at {} must be a string", path);
            if (lengths) fail("JSON schema: pattern with minLength / maxLength at {} is not supported", path);
            return gram::seq({quote, regex_to_grammar(s["pattern"].get<std::string>(), g_), quote});
        }
        const int64_t min = count(s, "minLength", 0, path), max = count(s, "maxLength", -1, path);
        if (max >= 0 && max < min) fail("JSON schema: maxLength < minLength at {}", path);
        const GrammarExpr chars = gram::rep(gram::ref(primitive(g_, "json-char")), static_cast<int32_t>(min), static_cast<int32_t>(max));
        return gram::seq({quote, chars, quote});
    }

    static std::optional<int64_t> bound(const json& s, const char* inclusive, const char* exclusive, bool lower,
                                        const std::string& path) {
        std::optional<int64_t> b;
        for (const char* key : {inclusive, exclusive}) {
            if (!s.contains(key)) continue;
            if (!s[key].is_number()) fail("JSON schema: {} at {} must be a number", key, path);
            const double v = s[key].get<double>();
            if (!(std::fabs(v) <= 1e18)) fail("JSON schema: {} at {} is beyond +-1e18", key, path);
            // The nearest integer inside the bound.
            const double in = key == exclusive ? (lower ? std::floor(v) + 1 : std::ceil(v) - 1) : (lower ? std::ceil(v) : std::floor(v));
            const auto i = static_cast<int64_t>(in);
            b = !b ? i : lower ? std::max(*b, i) : std::min(*b, i);
        }
        return b;
    }

    GrammarExpr integer(const json& s, const std::string& path) {
        const auto lo = bound(s, "minimum", "exclusiveMinimum", true, path);
        const auto hi = bound(s, "maximum", "exclusiveMaximum", false, path);
        if (!lo && !hi) return gram::ref(primitive(g_, "json-integer"));
        return integer_range(lo, hi);
    }

    GrammarExpr array(const json& s, const std::string& path, int depth);
    GrammarExpr object(const json& s, const std::string& path, int depth);
    GrammarExpr key_other_than(const std::vector<std::string>& names);

    const json& root_;
    Grammar g_;
    std::map<std::string, int32_t> refs_;  // $ref -> its rule
};

// Members in the order of "properties", each optional one skippable, as two families
// of rules: first_i (properties i.. when none was written yet) and rest_i (the same
// after one was, so each starts with a comma). Extra keys, when allowed, follow.
GrammarExpr SchemaCompiler::object(const json& s, const std::string& path, int depth) {
    const json props = s.contains("properties") ? s["properties"] : json::object();
    if (!props.is_object()) fail("JSON schema: properties at {} must be an object", path);
    std::set<std::string> required;
    for (const json& r : s.contains("required") ? s["required"] : json::array()) {
        if (!r.is_string()) fail("JSON schema: required at {} must list strings", path);
        if (!props.contains(r.get<std::string>()))
            fail("JSON schema: required property '{}' at {} is not in properties (not supported)", r.get<std::string>(), path);
        required.insert(r.get<std::string>());
    }
    // Absent additionalProperties: no other keys when properties are named (see json_schema.h).
    const json extra = s.contains("additionalProperties") ? s["additionalProperties"] : json(props.empty());
    const GrammarExpr ws = gram::ref(primitive(g_, "ws"));
    if (props.empty() && extra == json(true)) return gram::ref(primitive(g_, "json-object"));

    std::vector<std::string> names;
    std::vector<GrammarExpr> members;  // ws "name": ws value
    for (const auto& [name, sub] : props.items()) {
        const std::string sub_path = path + "/" + name;
        const int32_t rule = g_.rule(rule_name(sub_path));
        g_.define(rule, gram::seq({ws, gram::lit(json(name).dump() + ":"), ws, value(sub, sub_path, depth + 1)}));
        names.push_back(name);
        members.push_back(gram::ref(rule));
    }
    std::optional<GrammarExpr> extra_member;
    if (extra != json(false)) {
        const GrammarExpr key = names.empty() ? gram::ref(primitive(g_, "json-string")) : key_other_than(names);
        const int32_t rule = g_.rule(rule_name(path + "/additional"));
        g_.define(rule, gram::seq({ws, key, gram::lit(":"), ws, value(extra, path + "/additionalProperties", depth + 1)}));
        extra_member = gram::ref(rule);
    }
    const size_t n = names.size();
    // rest[0] is needed only after extra keys: property 0 never follows anything.
    std::vector<int32_t> first(n + 1), rest(n + 1, -1);
    for (size_t i = 0; i <= n; ++i) {
        first[i] = g_.rule(rule_name(fmt::format("{}/first{}", path, i)));
        if (i > 0 || n == 0) rest[i] = g_.rule(rule_name(fmt::format("{}/rest{}", path, i)));
    }
    const GrammarExpr comma = gram::lit(",");
    g_.define(rest[n], extra_member ? gram::star(gram::seq({comma, *extra_member})) : gram::seq({}));
    g_.define(first[n], extra_member ? gram::opt(gram::seq({*extra_member, gram::ref(rest[n])})) : gram::seq({}));
    for (size_t i = n; i-- > 0;) {
        const GrammarExpr with_comma = gram::seq({comma, members[i], gram::ref(rest[i + 1])});
        const GrammarExpr without = gram::seq({members[i], gram::ref(rest[i + 1])});
        const bool req = required.count(names[i]) > 0;
        if (i > 0) g_.define(rest[i], req ? with_comma : gram::alt({with_comma, gram::ref(rest[i + 1])}));
        g_.define(first[i], req ? without : gram::alt({without, gram::ref(first[i + 1])}));
    }
    return gram::seq({gram::lit("{"), gram::ref(first[0]), ws, gram::lit("}")});
}

namespace {

struct KeyTrie {
    std::map<uint32_t, KeyTrie> next;
    bool ends = false;  // a name ends here
};

// Key contents from this trie node on that spell none of the names: follow a name, or
// leave it with a character no name has here (then anything), or stop where no name does.
GrammarExpr other_than(const KeyTrie& node, Grammar& g) {
    std::vector<GrammarExpr> alts;
    std::vector<CharRange> taken = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (const auto& [cp, child] : node.next) {
        alts.push_back(gram::seq({gram::lit(schema::json_escaped(cp)), other_than(child, g)}));
        taken.push_back({cp, cp});
    }
    const GrammarExpr other = gram::alt({gram::cls(taken, true), gram::seq({gram::lit("\\"), gram::ref(primitive(g, "json-escape"))})});
    alts.push_back(gram::seq({other, gram::star(gram::ref(primitive(g, "json-char")))}));
    if (!node.ends) alts.push_back(gram::seq({}));
    return gram::alt(std::move(alts));
}

}  // namespace

GrammarExpr SchemaCompiler::key_other_than(const std::vector<std::string>& names) {
    KeyTrie root;
    for (const std::string& name : names) {
        KeyTrie* node = &root;
        for (size_t i = 0; i < name.size();) node = &node->next[next_utf8(name, i)];
        node->ends = true;
    }
    const GrammarExpr quote = gram::lit("\"");
    return gram::seq({quote, other_than(root, g_), quote});
}

// Elements: prefixItems first, then items (absent or true: any value; false: none),
// minItems..maxItems of them in all.
GrammarExpr SchemaCompiler::array(const json& s, const std::string& path, int depth) {
    const json prefix = s.contains("prefixItems") ? s["prefixItems"] : json::array();
    if (!prefix.is_array()) fail("JSON schema: prefixItems at {} must be an array", path);
    const json items = s.contains("items") ? s["items"] : json(true);
    if (items.is_array()) fail("JSON schema: items as an array at {} is not supported (use prefixItems)", path);
    const auto k = static_cast<int64_t>(prefix.size());
    const int64_t lo = count(s, "minItems", 0, path);
    int64_t hi = count(s, "maxItems", -1, path);
    if (items == json(false)) hi = hi < 0 ? k : std::min(hi, k);
    if (hi >= 0 && lo > hi) fail("JSON schema: minItems above what maxItems / prefixItems allow at {}", path);

    std::vector<GrammarExpr> fixed;
    for (int64_t j = 0; j < k; ++j) fixed.push_back(value(prefix[static_cast<size_t>(j)], fmt::format("{}/prefixItems/{}", path, j), depth + 1));
    std::optional<GrammarExpr> item;
    if (items != json(false) && (hi < 0 || hi > k)) {
        const int32_t rule = g_.rule(rule_name(path + "/items"));
        g_.define(rule, value(items, path + "/items", depth + 1));
        item = gram::ref(rule);
    }
    const GrammarExpr ws = gram::ref(primitive(g_, "ws"));
    const GrammarExpr comma = gram::lit(",");
    // Elements j.. each after a comma: nested optionals over the prefix, then a repetition.
    GrammarExpr tail = item ? gram::rep(gram::seq({comma, ws, *item}), static_cast<int32_t>(std::max<int64_t>(0, lo - std::max<int64_t>(k, 1))),
                                        hi < 0 ? -1 : static_cast<int32_t>(hi - std::max<int64_t>(k, 1)))
                            : gram::seq({});
    for (int64_t j = std::min<int64_t>(k, hi < 0 ? k : hi) - 1; j >= 1; --j) {
        GrammarExpr here = gram::seq({comma, ws, fixed[static_cast<size_t>(j)], std::move(tail)});
        tail = j < lo ? std::move(here) : gram::opt(std::move(here));
    }
    const GrammarExpr open = gram::lit("["), close = gram::seq({ws, gram::lit("]")});
    if (hi == 0) return gram::seq({open, close});
    GrammarExpr elements = gram::seq({ws, k > 0 ? fixed[0] : *item, std::move(tail)});
    if (lo == 0) elements = gram::opt(std::move(elements));
    return gram::seq({open, std::move(elements), close});
}

}  // namespace strata::schema

namespace strata {

Grammar json_schema_to_grammar(const nlohmann::ordered_json& schema) { return schema::SchemaCompiler(schema).run(); }

Grammar json_schema_to_grammar(const nlohmann::json& schema) {
    // nlohmann::json has already sorted the keys: properties come in alphabetical order.
    return json_schema_to_grammar(nlohmann::ordered_json::parse(schema.dump()));
}

Grammar json_object_grammar() {
    Grammar g;
    g.add("root", gram::ref(schema::primitive(g, "json-object")));
    return g;
}

}  // namespace strata
