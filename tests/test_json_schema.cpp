// JSON schema -> grammar: for each schema, hand-written documents accepted and refused,
// and random generation under the grammar whose outputs must parse and validate (by
// the small validator below, which knows the subset json_schema.h supports).
#include <catch2/catch.hpp>

#include <regex>

#include "engine/core/error.h"
#include "engine/sample/compiled_grammar.h"
#include "engine/sample/json_schema.h"
#include "tests/grammar_helpers.h"

using namespace strata;
using nlohmann::json;

namespace {

size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

const char* kFormatRegex[][2] = {
    {"date", R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)"},
    {"time", R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"},
    {"date-time", R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"},
    {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
    {"email", R"(^[^@\s]+@[^@\s]+\.[^@\s]+$)"},
    {"ipv4", R"(^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)"},
};

bool valid(const json& v, const json& s, const json& root);

bool valid_object(const json& v, const json& s, const json& root) {
    const json props = s.value("properties", json::object());
    for (const auto& r : s.value("required", json::array()))
        if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
        if (props.contains(k)) {
            if (!valid(x, props[k], root)) return false;
        } else if (s.contains("additionalProperties")) {
            if (!valid(x, s["additionalProperties"], root)) return false;
        }
    }
    return true;
}

bool valid_array(const json& v, const json& s, const json& root) {
    const json prefix = s.value("prefixItems", json::array());
    if (v.size() < s.value("minItems", size_t{0}) || v.size() > s.value("maxItems", size_t(-1))) return false;
    for (size_t i = 0; i < v.size(); ++i) {
        const json& item_schema = i < prefix.size() ? prefix[i] : s.value("items", json(true));
        if (!valid(v[i], item_schema, root)) return false;
    }
    return true;
}

bool valid_string(const std::string& v, const json& s) {
    const size_t n = code_points(v);
    if (n < s.value("minLength", size_t{0}) || n > s.value("maxLength", size_t(-1))) return false;
    if (s.contains("pattern") && !std::regex_search(v, std::regex(s["pattern"].get<std::string>()))) return false;
    if (s.contains("format")) {
        for (const auto& [name, re] : kFormatRegex)
            if (s["format"] == name) return std::regex_search(v, std::regex(re));
        return false;
    }
    return true;
}

bool valid_integer(const json& v, const json& s) {
    const double x = v.get<double>();
    return !(s.contains("minimum") && x < s["minimum"].get<double>()) &&
           !(s.contains("maximum") && x > s["maximum"].get<double>()) &&
           !(s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) &&
           !(s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>());
}

bool has_type(const json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") return v.is_number_integer();
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    return v.is_null();
}

bool valid(const json& v, const json& s, const json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"];
        if (ref == "#") return valid(v, root, root);
        return valid(v, root.at(json::json_pointer(ref.substr(1))), root);
    }
    for (const auto& sub : s.value("allOf", json::array()))
        if (!valid(v, sub, root)) return false;
    for (const char* key : {"anyOf", "oneOf"}) {
        if (!s.contains(key)) continue;
        bool any = false;
        for (const auto& sub : s[key]) any = any || valid(v, sub, root);
        if (!any) return false;
    }
    if (s.contains("const") && v != s["const"]) return false;
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
    if (s.contains("type")) {
        const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
        bool any = false;
        for (const auto& t : types) any = any || has_type(v, t.get<std::string>());
        if (!any) return false;
    }
    if (v.is_object()) return valid_object(v, s, root);
    if (v.is_array()) return valid_array(v, s, root);
    if (v.is_string()) return valid_string(v.get<std::string>(), s);
    if (v.is_number()) return valid_integer(v, s);
    return true;
}

struct Case {
    const char* schema;
    std::vector<const char*> good, bad;
};

const std::vector<Case>& cases() {
    static const std::vector<Case> c = {
        {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"}},
            "required":["name","age","ok"],"additionalProperties":false})",
         {R"({"name":"Ann","age":3,"ok":true})", "{ \"name\": \"A\",\n  \"age\": -1, \"ok\": false }"},
         {R"({"name":"Ann","age":3})", R"({"age":3,"name":"Ann","ok":true})", R"({"name":"Ann","age":3.5,"ok":true})",
          R"({"name":"Ann","age":3,"ok":true,"x":1})", R"( {"name":"Ann","age":3,"ok":true})"}},
        {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"null"}},"required":["b"]})",
         {R"({"b":""})", R"({"a":1,"b":"x"})", R"({"b":"x","c":null})", R"({"a":1,"b":"x","c":null})"},
         {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","d":1})"}},
        {R"({"type":"object","properties":{"rows":{"type":"array","items":{"type":"object","properties":
            {"id":{"type":"integer"},"cells":{"type":"array","items":{"type":"array","items":{"type":"number"}}}},
            "required":["id","cells"]}}},"required":["rows"]})",
         {R"({"rows":[]})", R"({"rows":[{"id":1,"cells":[[1.5,2e3],[]]},{"id":2,"cells":[]}]})"},
         {R"({"rows":[{"id":1}]})", R"({"rows":[{"id":1,"cells":[[true]]}]})"}},
        {R"({"enum":["red","green",3,null,{"a":[1]}]})", {R"("red")", "3", "null", R"({"a":[1]})"}, {R"("blue")", "4", R"({"a": [1]})"}},
        {R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}},
        {R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":10}]})", {R"("ab")", "10", "99999"},
         {R"("abc")", "9", "-1"}},
        {R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
                      {"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"string"}},"required":["kind","y"]}]})",
         {R"({"kind":"a","x":1})", R"({"kind":"b","y":"z"})"}, {R"({"kind":"a","y":"z"})", R"({"kind":"c","x":1})"}},
        {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},
            "required":["v"]}},"$ref":"#/$defs/node"})",
         {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"}, {R"({"v":1,"kids":[{}]})", R"({"kids":[]})"}},
        {R"({"definitions":{"pt":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false,"minItems":2}},
            "type":"object","properties":{"from":{"$ref":"#/definitions/pt"},"to":{"$ref":"#/definitions/pt"}},"required":["from","to"]})",
         {R"({"from":[0,1],"to":[2.5,-3]})"}, {R"({"from":[0],"to":[1,2]})", R"({"from":[0,1,2],"to":[1,2]})"}},
        {R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})", {R"("555-1234")"}, {R"("5551234")", R"("555-12345")"}},
        {R"({"type":"string","pattern":"ab+c|x[^y\"]"})", {R"("zzabbbc")", R"("xq")", R"("x\\")"}, {R"("ac")", R"("xy")", R"("x\"")"}},
        {R"({"type":"string","pattern":"^(?:[A-Z][a-z]*\\s?){1,3}\\.?$"})", {R"("Hello World.")", R"("A")"}, {R"("hello")", R"("A B C D")"}},
        {R"({"type":"string","format":"date-time"})", {R"("2024-02-29T12:30:00Z")", R"("1999-12-31T23:59:59.123+05:30")"},
         {R"("2024-13-01T00:00:00Z")", R"("2024-01-01 00:00:00")"}},
        {R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567e89b12d3a456426614174000")"}},
        {R"({"type":"object","properties":{"mail":{"type":"string","format":"email"},"ip":{"type":"string","format":"ipv4"},
            "day":{"type":"string","format":"date"},"at":{"type":"string","format":"time"}}})",
         {R"({"mail":"a.b@ex.com","ip":"192.168.0.255","day":"2024-01-31","at":"08:00:00Z"})"},
         {R"({"mail":"a@b"})", R"({"ip":"256.1.1.1"})", R"({"day":"2024-1-31"})"}},
        {R"({"type":"integer","minimum":-20,"maximum":35})", {"-20", "-9", "0", "7", "35"}, {"-21", "36", "100", "-0", "007"}},
        {R"({"type":"integer","exclusiveMinimum":99,"exclusiveMaximum":1001})", {"100", "555", "1000"}, {"99", "1001", "10"}},
        {R"({"type":"array","items":{"type":"number"},"minItems":2,"maxItems":4})", {"[1,2]", "[1, -2.5e-3, 3, 4E+2]"},
         {"[1]", "[1,2,3,4,5]", "[01,2]", "[1.,2]"}},
        {R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":3}},"required":["s"]})",
         {R"({"s":"ab"})", R"({"s":"\u00e9\u00e9\u00e9"})", R"({"s":"\"\\"})"}, {R"({"s":"a"})", R"({"s":"abcd"})"}},
        {R"({"type":"object","properties":{},"additionalProperties":false})", {"{}", "{ }"}, {R"({"a":1})"}},
        {R"({})", {"1", R"({"a":[true,null,"x"]})", R"("s")"}, {"tru", "[1,]"}},
        {R"({"type":["string","null"]})", {R"("x")", "null"}, {"1", "[]"}},
        {R"({"type":"object","additionalProperties":{"type":"integer"}})", {"{}", R"({"a":1,"b":-2})"}, {R"({"a":"x"})"}},
        {R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"boolean"}})",
         {R"({"id":1})", R"({"id":1,"x":true,"idd":false})"}, {R"({"id":1,"id":true})", R"({"x":true,"id":1})"}},
        {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                      {"properties":{"b":{"type":"boolean"}},"required":["b"]}]})",
         {R"({"a":1,"b":true})"}, {R"({"a":1})", R"({"b":true})"}},
        {R"({"type":"array","prefixItems":[{"const":"head"},{"type":"boolean"}],"items":{"type":"null"}})",
         {"[]", R"(["head"])", R"(["head",true,null,null])"}, {R"(["head",null])", R"([true])"}},
        {R"({"type":"object","properties":{"t":{"type":"string","pattern":"^[^\\u0000-\\u001f]*é$"}},"required":["t"]})",
         {R"({"t":"café"})", R"({"t":"\"é"})"}, {R"({"t":"cafe"})", R"({"t":"é\n"})"}},
    };
    return c;
}

bool grammar_accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
    GrammarMatcher m(g, test::json_test_vocab());
    return m.accept_bytes(text) && m.complete();
}

}  // namespace

TEST_CASE("json schema: documents accepted and refused", "[grammar]") {
    for (const Case& c : cases()) {
        INFO("schema: " << c.schema);
        const auto g = CompiledGrammar::compile(json_schema_to_grammar(nlohmann::ordered_json::parse(c.schema)));
        for (const char* doc : c.good) {
            INFO("good: " << doc);
            CHECK(grammar_accepts(g, doc));
            CHECK(valid(json::parse(doc), json::parse(c.schema), json::parse(c.schema)));
        }
        for (const char* doc : c.bad) {
            INFO("bad: " << doc);
            CHECK_FALSE(grammar_accepts(g, doc));
        }
    }
}

TEST_CASE("json schema: random generation always parses and validates", "[grammar]") {
    for (const Case& c : cases()) {
        INFO("schema: " << c.schema);
        const json schema = json::parse(c.schema);
        const auto g = CompiledGrammar::compile(json_schema_to_grammar(nlohmann::ordered_json::parse(c.schema)));
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            GrammarMatcher m(g, test::json_test_vocab());
            const test::Generated out = test::generate_random(m, seed);
            INFO("seed " << seed << ": " << out.text);
            REQUIRE(out.finished);
            CHECK(out.mask_mismatches == 0);
            json doc;
            REQUIRE_NOTHROW(doc = json::parse(out.text));
            CHECK(valid(doc, schema, schema));
        }
    }
}

TEST_CASE("json schema: json_object allows any object and nothing else", "[grammar]") {
    const auto g = CompiledGrammar::compile(json_object_grammar());
    CHECK(grammar_accepts(g, R"({"a":{"b":[1,2.5,"\u00e9\ud83d\ude00",null]},"c":false})"));
    CHECK(grammar_accepts(g, "{\n  \"a\": 1\n}"));
    CHECK_FALSE(grammar_accepts(g, "[1]"));
    CHECK_FALSE(grammar_accepts(g, R"({"a":"\ud800"})"));  // a lone surrogate
    CHECK_FALSE(grammar_accepts(g, "{\"a\":1}" + std::string(3, ' ')));
    CHECK_FALSE(grammar_accepts(g, "{" + std::string(30, ' ') + "}"));  // whitespace is bounded
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        GrammarMatcher m(g, test::json_test_vocab());
        const test::Generated out = test::generate_random(m, seed);
        INFO(out.text);
        REQUIRE(out.finished);
        CHECK(json::parse(out.text).is_object());
    }
}

TEST_CASE("json schema: properties keep their written order with ordered_json only", "[grammar]") {
    const char* schema = R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})";
    const auto ordered = CompiledGrammar::compile(json_schema_to_grammar(nlohmann::ordered_json::parse(schema)));
    const auto sorted = CompiledGrammar::compile(json_schema_to_grammar(json::parse(schema)));
    CHECK(grammar_accepts(ordered, R"({"z":1,"a":2})"));
    CHECK(grammar_accepts(sorted, R"({"a":2,"z":1})"));
}

TEST_CASE("json schema: what is not supported is refused by name", "[grammar]") {
    const std::pair<const char*, const char*> refused[] = {
        {R"({"type":"string","foo":1})", "'foo'"},
        {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
        {R"({"type":"number","multipleOf":2})", "'multipleOf'"},
        {R"({"type":"object","patternProperties":{}})", "'patternProperties'"},
        {R"({"type":"object","properties":{"a":{"not":{}}}})", "'not'"},
        {R"({"type":"number","minimum":0})", "integer only"},
        {R"({"type":"string","minimum":0})", "does not apply to type string"},
        {R"({"type":"string","format":"uri"})", "\"uri\""},
        {R"({"type":"string","pattern":"(a)\\1"})", "escape '\\1'"},
        {R"j({"type":"string","pattern":"a(?=b)"})j", "lookaround"},
        {R"({"type":"string","pattern":"^a|b$"})", "top-level '|'"},
        {R"({"type":"string","pattern":"a^b"})", "'^'"},
        {R"({"$ref":"http://x/y"})", "$ref 'http://x/y'"},
        {R"({"$ref":"#/$defs/missing"})", "names no definition"},
        {R"({"type":"object","properties":{"a":false}})", "is false"},
        {R"({"type":"object","required":["b"],"properties":{"a":{}}})", "'b'"},
        {R"({"type":"array","items":[{"type":"integer"}]})", "prefixItems"},
        {R"({"type":"integer","minimum":1e30})", "1e18"},
        {R"({"type":"string","maxLength":1000000})", "maxLength"},
        {R"({"type":"nothing"})", "unknown type"},
        {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "'type' differs"},
    };
    for (const auto& [schema, words] : refused) {
        INFO(schema);
        CHECK_THROWS_WITH(json_schema_to_grammar(nlohmann::ordered_json::parse(schema)), Catch::Contains(words));
    }
    // Deep nesting is refused, never a stack overflow.
    std::string deep = R"({"type":"string"})";
    for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
    CHECK_THROWS_WITH(json_schema_to_grammar(nlohmann::ordered_json::parse(deep)), Catch::Contains("nested deeper"));
}
