// The Jinja engine (engine/text/jinja): each feature against what jinja2 3.1 renders in
// Hugging Face's chat-template environment, the literal ranges of the output, errors,
// and real chat templates (tests/data/templates, from llama.cpp's models/templates)
// over a set of conversations, byte for byte against jinja2's own renderings
// (tests/data/templates/render_expected.py).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/text/jinja/template.h"

using namespace strata;
using jinja::Template;
using json = nlohmann::ordered_json;  // keeps key order, as the requests HF renders

namespace {

std::string render(std::string_view src, const json& data = json::object(),
                   const jinja::RenderOptions& opt = {}) {
    return Template::parse(src).render(data, opt).text;
}

// The message of the strata::Error that rendering `src` throws ("" if none).
std::string error_of(std::string_view src) {
    try {
        render(src);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::string read_file(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    REQUIRE(f);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The fixed clock of render_expected.py: 2024-07-26 09:30:00.
std::tm fixed_now() {
    std::tm t{};
    t.tm_year = 2024 - 1900;
    t.tm_mon = 6;
    t.tm_mday = 26;
    t.tm_hour = 9;
    t.tm_min = 30;
    t.tm_wday = 5;  // a Friday
    t.tm_yday = 207;
    return t;
}

}  // namespace

// ---------------------------------------------------------------- features

namespace {

struct Case {
    const char* section;
    const char* source;
    const char* data;      // the context, JSON
    const char* expected;  // what jinja2 3.1 renders in HF's environment
};

// Generated with jinja2 (the environment of tests/data/templates/render_expected.py,
// with bos_token "<s>"); the date is fixed_now().
const Case kCases[] = {
    {"whitespace", R"x(a  {%- if true -%}  b  {%- endif -%}  c)x",
     R"x({})x",
     R"x(abc)x"},
    {"whitespace", R"x({% if true %}
yes
{% endif %}
no)x",
     R"x({})x",
     R"x(yes
no)x"},
    {"whitespace", R"x(  {% if true %}
  x
  {% endif %}
end)x",
     R"x({})x",
     R"x(  x
end)x"},
    {"whitespace", R"x(a  {%+ if true %}b{% endif %})x",
     R"x({})x",
     R"x(a  b)x"},
    {"whitespace", R"x(a {# c #}
b
  {# c #}
c)x",
     R"x({})x",
     R"x(a b
c)x"},
    {"whitespace", R"x({{ 'x' }}
y
  {{ 'z' }})x",
     R"x({})x",
     R"x(x
y
  z)x"},
    {"whitespace", R"x([ {{- ' x ' -}} ])x",
     R"x({})x",
     R"x([ x ])x"},
    {"whitespace", R"x({% raw %}{{ x }}{% if %}{% endraw %}!)x",
     R"x({})x",
     R"x({{ x }}{% if %}!)x"},
    {"whitespace", R"x(a
b
)x",
     R"x({})x",
     R"x(a
b)x"},
    {"whitespace", R"x({% for x in l %}
    {{ x }}
{% endfor %}
)x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(    1
    2
    3
)x"},
    {"whitespace", R"x({%- for x in l -%}
  {{- x -}}
{%- endfor %} end)x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(123 end)x"},
    {"loops", R"x({% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %})x",
     R"x({})x",
     R"x(1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 )x"},
    {"loops", R"x({% for x in [1,2,3] %}{{ loop.previtem|default('-') }}{{ loop.nextitem|default('-') }} {% endfor %})x",
     R"x({})x",
     R"x(-2 13 2- )x"},
    {"loops", R"x({% for x in [] %}x{% else %}empty{% endfor %})x",
     R"x({})x",
     R"x(empty)x"},
    {"loops", R"x({% for x in range(10) if x is odd %}{{ x }}/{{ loop.index }}/{{ loop.length }},{% endfor %})x",
     R"x({})x",
     R"x(1/1/5,3/2/5,5/3/5,7/4/5,9/5/5,)x"},
    {"loops", R"x({% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for k, v in d.items() %}{{ k }}{% endfor %})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(b=1;a=[1, {'c': 'x'}];baba)x"},
    {"loops", R"x({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})x",
     R"x({})x",
     R"x(0134)x"},
    {"loops", R"x({% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }})x",
     R"x({})x",
     R"x(213)x"},
    {"loops", R"x({% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }})x",
     R"x({})x",
     R"x(6 0123)x"},
    {"loops", R"x({% for a in [1,2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %})x",
     R"x({})x",
     R"x(11x 21y 1|12x 22y 2|)x"},
    {"loops", R"x({% for i in range(5) %}{{ loop.cycle('a','b') }}{% endfor %})x",
     R"x({})x",
     R"x(ababa)x"},
    {"loops", R"x({% for m in messages[::-1] %}{{ m.role }}{% endfor %})x",
     R"x({"messages": [{"role": "u"}, {"role": "a"}]})x",
     R"x(au)x"},
    {"set", R"x({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = [3, 4] %}{% set x, y = c %}{{ x + y }})x",
     R"x({})x",
     R"x(127)x"},
    {"set", R"x({% set x %}  hi {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}yo{% endset %}{{ y }})x",
     R"x({})x",
     R"x([  hi 1]YO)x"},
    {"macros", R"x({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy') }} [{{ greet() }}])x",
     R"x({})x",
     R"x(Hi Bob! Hi Al? Hi Cy! [Hi !])x"},
    {"macros", R"x({% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }})x",
     R"x({})x",
     R"x(321)x"},
    {"macros", R"x({% set g = 'G' %}{% macro m(x=g) %}{{ g }}{{ x }}{% endmacro %}{{ m() }}{% macro t() %}  x  {% endmacro %}[{{ t()|trim }}])x",
     R"x({})x",
     R"x(GG[x])x"},
    {"macros", R"x({% macro render(c) %}{% if c is string %}{{ c }}{% else %}{% for p in c %}{{ p.text }}{% endfor %}{% endif %}{% endmacro %}{{ render('s') }}{{ render([{'text': 'a'}, {'text': 'b'}]) }})x",
     R"x({})x",
     R"x(sab)x"},
    {"expressions", R"x({{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 1.5 + 1 }} {{ -7.5 // 2 }} {{ 2 ** -1 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }})x",
     R"x({})x",
     R"x(7 3 -4 1 2 1024 3.5 2.0 2.5 -4.0 0.5 9 4)x"},
    {"expressions", R"x({{ 'a' ~ 1 ~ none ~ nothing ~ 2.5 }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ true + 1 }})x",
     R"x({})x",
     R"x(a1None2.5 ababab [1, 2] ab 2)x"},
    {"expressions", R"x({{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ none == none }} {{ 2 >= 2.0 }})x",
     R"x({})x",
     R"x(True False True True True True True True)x"},
    {"expressions", R"x({{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ not 3 in [1] }} {{ 'a' in nothing }})x",
     R"x({})x",
     R"x(True True True True True False)x"},
    {"expressions", R"x({{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }}|{{ not 0 }} {{ not not 'a' }} {{ 0 and 1 }})x",
     R"x({})x",
     R"x(x y []|True True 0)x"},
    {"expressions", R"x({{ 'a' if true else 'b' }}{{ 'c' if false }}|{{ 'd' if 0 else 'e' if 1 else 'f' }})x",
     R"x({})x",
     R"x(a|e)x"},
    {"expressions", R"x({{ [1, 'two', 3.0, true, none] }} {{ {'a': 1, 'b': [2], 3: 'c'} }} {{ (1, 2)|list }} {{ [] }} {{ {} }})x",
     R"x({})x",
     R"x([1, 'two', 3.0, True, None] {'a': 1, 'b': [2], 3: 'c'} [1, 2] [] {})x"},
    {"expressions", R"x({{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1_000 }} {{ 2.5e-3 }} {{ 10 / 4 }})x",
     R"x({})x",
     R"x(None True False 1.0 1e+20 0.30000000000000004 -0.0 1000 0.0025 2.5)x"},
    {"expressions", R"x({{ 'it\'s' }} {{ "a\tb" }} {{ '\u00e9\x41\101' }} {{ ["it's", 'a\nb', 'q"', 'both\'"', '\\'] }} {{ 'a' 'b' }} {{ 'x\qy' }})x",
     R"x({})x",
     R"x(it's a	b éAA ["it's", 'a\nb', 'q"', 'both\'"', '\\'] ab x\qy)x"},
    {"expressions", R"x({{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][-2:] }} {{ [1,2,3,4][::2] }} {{ 'héllo'[1] }} {{ 'héllo'[-4:] }} {{ [1,2,3][5:] }} {{ l[:-1] }} {{ l[10:0:-1] }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(el olleh [3, 4] [1, 3] é éllo [] [1, 2] [3, 2])x"},
    {"expressions", R"x({{ d.b }} {{ d['a'][1].c }} {{ d.missing is defined }} {{ l[5] is defined }} {{ l[-1] }} {{ l.0 }} {{ d['items'] is defined }} [{{ nothing }}] {{ none.x is defined }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(1 x False False 3 1 True [] False)x"},
    {"expressions", R"x({{ d['items'] }} {{ d.items is callable }} {{ d.get('items') }} {{ d.get('nope', 'dflt') }} {{ d.get('nope') }})x",
     R"x({"d": {"items": 7}})x",
     R"x(7 True 7 dflt None)x"},
    {"expressions", R"x({{ {'a': 1}.keys()|list }} {{ {'a': 1}.values()|list }} {{ {'a': 1}.items()|list }} {{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }})x",
     R"x({})x",
     R"x(['a'] [1] [('a', 1)] 2 1)x"},
    {"methods", R"x({{ ' a b '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b  c '.split(none, 1) }}|{{ ' a b  c '.rsplit(none, 1) }}|{{ 'a\nb\r\nc'.splitlines() }})x",
     R"x({})x",
     R"x(a b|a|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b,c']|['a,b', 'c']|['a', 'b  c ']|[' a b', 'c']|['a', 'b', 'c'])x"},
    {"methods", R"x({{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'hello wORLD-x'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'banana'.count('a') }} {{ 'banana'.find('n') }} {{ 'banana'.rfind('n') }} {{ 'banana'.find('z') }} {{ ', '.join(['a', 'b']) }} {{ '12'.isdigit() }})x",
     R"x({})x",
     R"x(True True Hello World-X Hello ABC abc a+b+c ab-c 3 2 4 -1 a, b True)x"},
    {"filters", R"x({{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') }}|{{ [1,2,3]|length }}|{{ 'héllo'|length }}|{{ d|count }}|{{ [3,1,2]|first }}|{{ [3,1,2]|last }}|{{ 'abc'|first }}|{{ [1,2]|join(', ') }}|{{ nothing|default('d') }}|{{ ''|default('e', true) }}|{{ ''|d('f') }}|{{ none|default('n') }}|{{ nothing|length }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(x|y|3|5|2|3|2|a|1, 2|d|e||None|0)x"},
    {"filters", R"x({{ users|map(attribute='name')|join(',') }}|{{ ['a','b']|map('upper')|list }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|list|length }}|{{ [1,2,3,4]|select('even')|list }}|{{ [1,2,3,4]|reject('odd')|list }}|{{ users|selectattr('name', 'equalto', 'b')|list|length }}|{{ [0, 1, '', 'a']|select|list }}|{{ users|map(attribute='missing', default='m')|list }}|{{ users|join('/', attribute='name') }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(a,b,c|['A', 'B']|['a', 'c']|1|[2, 4]|[2, 4]|1|[1, 'a']|['m', 'm', 'm']|a/b/c)x"},
    {"filters", R"x({{ '42'|int + 1 }}|{{ '3.5'|float }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '3.9'|int }}|{{ 5|string ~ 'a' }}|{{ 'ab'|list }}|{{ 4|float }}|{{ ' 12 '|int }})x",
     R"x({})x",
     R"x(43|3.5|0|7|3|3|5a|['a', 'b']|4.0|12)x"},
    {"filters", R"x({{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é"\n<'|tojson }}|{{ [1.0, none, true, 1e100]|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ {}|tojson(indent=2) }}|{{ [[]]|tojson(indent=1) }}|{{ d|tojson(separators=(',', ':')) }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x({"b": 1, "a": [1, {"c": "x"}]}|{
  "b": 1,
  "a": [
    1,
    {
      "c": "x"
    }
  ]
}|"é\"\n<"|[1.0, null, true, 1e+100]|{"a": [1, {"c": "x"}], "b": 1}|"\u00e9"|{}|[
 []
]|{"b":1,"a":[1,{"c":"x"}]})x"},
    {"filters", R"x({{ d|dictsort }}|{{ [3,1,2]|sort }}|{{ ['b','A','a']|sort }}|{{ ['b','A','a']|sort(case_sensitive=true) }}|{{ [3,1,2]|sort(reverse=true) }}|{{ users|sort(attribute='name', reverse=true)|map(attribute='name')|list }}|{{ [1,2,1,3]|unique|list }}|{{ ['a','A']|unique|list }}|{{ [1,2,3]|sum }}|{{ users|sum(attribute='admin') }}|{{ [3,1,2]|max }}|{{ [3,1,2]|min }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x([('a', [1, {'c': 'x'}]), ('b', 1)]|[1, 2, 3]|['A', 'a', 'b']|['A', 'a', 'b']|[3, 2, 1]|['c', 'b', 'a']|[1, 2, 3]|['a']|6|2|3|1)x"},
    {"filters", R"x({{ -3|abs }}|{{ (-3)|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 3.14159|round(2) }}|{{ 3.1|round(0, 'ceil') }}|{{ 5|round }}|{{ [1,2,3]|reverse|list }}|{{ 'abc'|reverse }}|{{ [1,2,3]|batch(2)|list }}|{{ [1,2,3]|batch(2, 0)|list }})x",
     R"x({})x",
     R"x(3|3|2.0|4.0|3.14|4.0|5|[3, 2, 1]|cba|[[1, 2], [3]]|[[1, 2], [3, 0]])x"},
    {"filters", R"x({{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('>', blank=true) }}|{% filter upper %}abc{{ 'd' }}{% endfilter %}|{{ 'hello world'|title }} {{ "they're bill's-x (ok)"|title }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'Ab'|lower }}{{ 'Ab'|upper }}{{ 'aB'|capitalize }}|{{ d|items|list }}|{{ 5|string|length }}|{{ 'x'|safe }})x",
     R"x({"d": {"b": 1, "a": [1, {"c": "x"}]}, "l": [1, 2, 3], "users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}, {"name": "c", "admin": true}]})x",
     R"x(a
  b

  c|  a
  b|a
>
>b|ABCD|Hello World They're Bill's-X (Ok) bba abABAb|[('b', 1), ('a', [1, {'c': 'x'}])]|1|x)x"},
    {"tests", R"x({{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ [] is sequence }}{{ none is none }}{{ x is undefined }}{{ x is iterable }}{{ true is boolean }}{{ false is false }}{{ 1 is true }}{{ range is callable }})x",
     R"x({})x",
     R"x(TrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrue)x"},
    {"tests", R"x({{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 2 is in [1,2] }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 1 is gt 2 }}{{ 1 is le 1 }}{{ 1 is ge 1 }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'x' is not none }}{{ 1 is sameas 1 }}{{ 1 is equalto 1 }}{{ 1 is greaterthan 0 }})x",
     R"x({})x",
     R"x(TrueTrueTrueFalseTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrue)x"},
    {"globals", R"x({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {% set j = joiner(', ') %}{% for x in [1,2,3] %}{{ j() }}{{ x }}{% endfor %} {{ namespace(a=1).a }})x",
     R"x({})x",
     R"x([0, 1, 2] [1, 3, 5] [5, 3, 1] {'a': 1, 'b': 'x'} 1, 2, 3 1)x"},
    {"globals", R"x({{ strftime_now('%Y-%m-%d, %d %b %Y, %A %H:%M') }} {{ bos_token }})x",
     R"x({})x",
     R"x(2024-07-26, 26 Jul 2024, Friday 09:30 <s>)x"},

};

}  // namespace

TEST_CASE("jinja: features render as jinja2 does", "[jinja]") {
    jinja::RenderOptions opt;
    opt.trusted = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    opt.now = fixed_now();
    for (const Case& c : kCases) {
        INFO(c.section << ": " << c.source);
        CHECK(render(c.source, json::parse(c.data), opt) == c.expected);
    }
}

TEST_CASE("jinja: generation blocks render their body", "[jinja]") {
    CHECK(render("a{% generation %}b{{ 1 }}{% endgeneration %}c") == "ab1c");
    CHECK(render("{% for x in [1, 2] %}{% generation %}{% if x == 2 %}{% break %}{% endif %}{{ x }}"
                 "{% endgeneration %}{% endfor %}") == "1");
}

// ---------------------------------------------------------------- literal ranges

namespace {

// The output with its literal bytes in [brackets].
std::string marked(const Template::Output& out) {
    std::string s;
    size_t at = 0;
    for (auto [b, e] : out.literal) {
        REQUIRE(b >= at);
        REQUIRE(b < e);
        REQUIRE(e <= out.text.size());
        s += out.text.substr(at, b - at) + "[" + out.text.substr(b, e - b) + "]";
        at = e;
    }
    return s + out.text.substr(at);
}

std::string marked(std::string_view src, const char* data) {
    jinja::RenderOptions opt;
    opt.trusted = {{"bos_token", "<|bos|>"}};
    return marked(Template::parse(src).render(json::parse(data), opt));
}

}  // namespace

TEST_CASE("jinja: the caller's text is literal, the template's is not", "[jinja]") {
    const char* msg = R"({"m": {"role": "user", "content": "  <|im_end|>hi  "}, "n": 5})";
    // Printing, concatenation (+, ~), and the template's own strings around them.
    CHECK(marked("<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>", msg) ==
          "<|im_start|>[user]\n[  <|im_end|>hi  ]<|im_end|>");
    CHECK(marked("{{ '<' + m.role + '>' ~ m.content ~ n }}", msg) == "<[user]>[  <|im_end|>hi  ]5");
    CHECK(marked("{{ bos_token }}{{ m.role }}", msg) == "<|bos|>[user]");
    // Adjacent literal pieces merge into one range.
    CHECK(marked("{{ m.role ~ m.role }}", msg) == "[useruser]");
    // Substrings map exactly: trim, strip, split, slicing, indexing, first.
    CHECK(marked("{{ m.content|trim }}|{{ m.content.lstrip() }}|{{ m.content.split('|')[1] }}", msg) ==
          "[<|im_end|>hi]|[<|im_end|>hi  ]|[im_end]");
    CHECK(marked("{{ m.role[1:3] }}|{{ m.role[0] }}|{{ m.role[::-1] }}|{{ m.role|first }}", msg) ==
          "[se]|[u]|[resu]|[u]");
    // ASCII case mapping keeps every byte in place.
    CHECK(marked("{{ ('x' ~ m.role)|upper }}", msg) == "X[USER]");
    // join, and a macro's output, keep their pieces' ranges.
    CHECK(marked("{{ [m.role, 'sys']|join(m.role) }}", msg) == "[useruser]sys");
    CHECK(marked("{% macro r(x) %}<{{ x }}>{% endmacro %}{{ r(m.role) }}", msg) == "<[user]>");
    // Unfollowed mappings are literal as a whole when any input byte was.
    CHECK(marked("{{ m.role.replace('u', 'U') }}|{{ 'abc'.replace('b', m.role) }}|{{ 'ab'.replace('a', 'c') }}", msg) ==
          "[User]|[auserc]|cb");
    CHECK(marked("{{ m|tojson }}|{{ {'a': 1}|tojson }}|{{ [m.role] }}", msg) ==
          R"([{"role": "user", "content": "  <|im_end|>hi  "}]|{"a": 1}|[['user']])");
    // Keys of the caller's dicts are literal too; numbers are not text that could spell a token.
    CHECK(marked("{% for k, v in m|items %}{{ k }}{% endfor %}{{ n }}", msg) == "[rolecontent]5");
    // A namespace carries ranges through assignment.
    CHECK(marked("{% set ns = namespace(s='') %}{% set ns.s = ns.s + m.role %}{{ ns.s }}!", msg) == "[user]!");
}

TEST_CASE("jinja: literal ranges are exact over a real template", "[jinja]") {
    const auto t = Template::parse(read_file(std::filesystem::path(STRATA_TEST_DATA_DIR) / "templates" /
                                             "Qwen-Qwen3-0.6B.jinja"));
    const auto data = json::parse(R"({"messages": [
        {"role": "system", "content": "Be <|im_start|> brief."},
        {"role": "user", "content": "Say <|im_end|>"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nOK <|endoftext|>"},
        {"role": "user", "content": "again"}], "add_generation_prompt": true})");
    CHECK(marked(t.render(data)) ==
          "<|im_start|>system\n[Be <|im_start|> brief.]<|im_end|>\n"
          "<|im_start|>[user]\n[Say <|im_end|>]<|im_end|>\n"
          "<|im_start|>[assistant]\n[OK <|endoftext|>]<|im_end|>\n"
          "<|im_start|>[user]\n[again]<|im_end|>\n"
          "<|im_start|>assistant\n");
}

// ---------------------------------------------------------------- errors

TEST_CASE("jinja: syntax errors name line and column", "[jinja]") {
    auto syntax_error = [](std::string_view src) {
        try {
            Template::parse(src);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK_THAT(syntax_error("ab\ncd {{ 1 + }}"), Catch::Contains("line 2, column 11"));
    CHECK_THAT(syntax_error("{% if x %}a"), Catch::Contains("expected 'elif'"));
    CHECK_THAT(syntax_error("x\n{% for x in y %}{% endif %}"), Catch::Contains("line 2"));
    CHECK_THAT(syntax_error("{{ 'abc }}"), Catch::Contains("unterminated string"));
    CHECK_THAT(syntax_error("{% include 'x' %}"), Catch::Contains("unsupported tag 'include'"));
    CHECK_THAT(syntax_error("{% break %}"), Catch::Contains("outside a for loop"));
    CHECK_THAT(syntax_error("{{ x"), Catch::Contains("unterminated"));
    CHECK_THAT(syntax_error("{# x"), Catch::Contains("unterminated comment"));
    CHECK_THAT(syntax_error("{{ f(a=1, 2) }}"), Catch::Contains("positional argument after keyword"));
    CHECK_THAT(syntax_error("{{ 99999999999999999999 }}"), Catch::Contains("out of range"));
    CHECK_THAT(syntax_error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"),
               Catch::Contains("nested too deeply"));
    CHECK(syntax_error("{{ {'a': {'b': 1}} }}").empty());  // `}}` inside braces does not end the tag
}

TEST_CASE("jinja: runtime errors", "[jinja]") {
    CHECK(error_of("{{ raise_exception('Bad role') }}") == "Bad role (template line 1, column 1)");
    CHECK_THAT(error_of("a\n{% if true %}\n{{ x.y }}{% endif %}"), Catch::Contains("undefined") && Catch::Contains("line 3"));
    CHECK_THAT(error_of("{{ 1 + 'a' }}"), Catch::Contains("unsupported operand"));
    CHECK_THAT(error_of("{{ 1 // 0 }}"), Catch::Contains("by zero"));
    CHECK_THAT(error_of("{{ x + 1 }}"), Catch::Contains("undefined"));
    CHECK_THAT(error_of("{{ nope() }}"), Catch::Contains("'nope' is undefined"));
    CHECK_THAT(error_of("{{ [1].append(2) }}"), Catch::Contains("'append' is undefined"));  // no mutation, as HF's sandbox
    CHECK_THAT(error_of("{{ 1|nofilter }}"), Catch::Contains("unknown filter"));
    CHECK_THAT(error_of("{{ 1 is notatest }}"), Catch::Contains("unknown test"));
    CHECK_THAT(error_of("{% for x in none %}{% endfor %}"), Catch::Contains("not iterable"));
    CHECK_THAT(error_of("{% set x = 1 %}{% set x.a = 2 %}"), Catch::Contains("not a namespace"));
    CHECK_THAT(error_of("{{ 2 ** 64 }}"), Catch::Contains("overflow"));
    CHECK_THAT(error_of("{{ undefined_thing|tojson }}"), Catch::Contains("not JSON serializable"));
    CHECK_THAT(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), Catch::Contains("takes 1 arguments"));
    CHECK_THAT(error_of("{{ 'a'|trim(1, 2) }}"), Catch::Contains("at most 1"));
}

TEST_CASE("jinja: hostile templates hit limits, not the stack or the heap", "[jinja]") {
    CHECK_THAT(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), Catch::Contains("nested deeper"));
    CHECK_THAT(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
               Catch::Contains("steps"));
    CHECK_THAT(error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"), Catch::Contains("output exceeds"));
    CHECK_THAT(error_of("{{ 'x' * 1000000000000 }}"), Catch::Contains("too large"));
    CHECK_THAT(error_of("{{ range(1000000)|length }}"), Catch::Contains("limited"));
    // Shared parts: 2^40 bytes described in 40 steps.
    CHECK_THAT(error_of("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}"),
               Catch::Contains("grew past"));
    CHECK_THAT(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
                        "{% endfor %}{{ ns.l }}"),
               Catch::Contains("grew past"));
    CHECK_THAT(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
                        "{% endfor %}{{ ns.l|tojson }}"),
               Catch::Contains("grew past"));
    CHECK_THAT(error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}"), Catch::Contains("cannot hold a namespace"));
}

TEST_CASE("jinja: a template parses once and renders many times", "[jinja]") {
    const auto t = Template::parse(read_file(std::filesystem::path(STRATA_TEST_DATA_DIR) / "templates" /
                                             "Qwen-Qwen3-0.6B.jinja"));
    json data = {{"add_generation_prompt", true}, {"messages", json::array()}};
    for (int i = 0; i < 20; ++i) {
        data["messages"].push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'a' + i)}});
    }
    const auto start = std::chrono::steady_clock::now();
    const int n = 100;
    size_t total = 0;
    for (int i = 0; i < n; ++i) total += t.render(data).text.size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / n;
    CHECK(total == n * t.render(data).text.size());
    WARN("a 20-message Qwen3 conversation renders in " << ms << " ms");
    CHECK(ms < 20);  // generous: sanitizer and debug builds; a release build takes far less
}

// ---------------------------------------------------------------- real templates

TEST_CASE("jinja: real chat templates render as jinja2 does", "[jinja]") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(STRATA_TEST_DATA_DIR) / "templates";
    const auto conversations = json::parse(read_file(dir / "conversations.json"));
    jinja::RenderOptions opt;
    opt.trusted = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    opt.now = fixed_now();
    size_t checked = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".jinja") continue;
        const std::string name = entry.path().stem().string();
        const Template t = Template::parse(read_file(entry.path()));
        for (const auto& [conv, data] : conversations.items()) {
            const fs::path base = dir / "expected" / (name + "." + conv);
            INFO(name << " / " << conv);
            if (fs::exists(base.string() + ".txt")) {
                CHECK(t.render(data, opt).text == read_file(base.string() + ".txt"));
            } else {
                // "raise\n<message>": raise_exception's message; "other\n...": any error.
                const std::string expected = read_file(base.string() + ".err");
                std::string message;
                try {
                    t.render(data, opt);
                } catch (const Error& e) {
                    message = e.what();
                }
                CHECK(!message.empty());
                if (expected.starts_with("raise\n")) CHECK_THAT(message, Catch::StartsWith(expected.substr(6)));
            }
            ++checked;
        }
    }
    CHECK(checked >= 150);
}
