// Tool calls and structured output over HTTP: forced calls (tool_choice required / named)
// and response_format JSON follow their grammars whatever the (random) model prefers;
// streamed calls arrive as tool_calls deltas; auto tool choice parses what the model
// writes; bad schemas are 400s naming the keyword.
#include <catch2/catch.hpp>

#include "tests/server_helpers.h"

using namespace strata;
using namespace strata::test;

namespace {

const std::string kTools = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":7}},
    "required":["city","days"],"additionalProperties":false}}},
    {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}])";

std::string chat(const std::string& extra) {
    // Room for a random model that takes all the whitespace the JSON grammar allows.
    return R"({"messages":[{"role":"user","content":"Weather in Oslo?"}],"max_tokens":600,)" + extra + "}";
}

void check_weather_call(const json& call) {
    CHECK(call["type"] == "function");
    CHECK(call["function"]["name"] == "get_weather");
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    REQUIRE(args.is_object());
    CHECK(args["city"].is_string());
    CHECK(args["city"].get<std::string>().size() <= 12 * 4);  // 12 characters of UTF-8
    REQUIRE(args["days"].is_number_integer());
    CHECK(args["days"].get<int>() >= 1);
    CHECK(args["days"].get<int>() <= 7);
}

}  // namespace

TEST_CASE("server tools: a named tool_choice forces one call that follows the schema", "[server][tool_calls]") {
    TestServer s({.n_ctx = 2048});
    for (const char* temp : {"0", "1"}) {
        INFO("temperature " << temp);
        const Reply r = post(s, "/v1/chat/completions",
                             chat(R"("tools":)" + kTools + R"(,"parallel_tool_calls":false,"temperature":)" + temp +
                                  R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
        INFO(r.body);
        REQUIRE(r.status == 200);
        const json& c = r.j["choices"][0];
        CHECK(c["finish_reason"] == "tool_calls");
        CHECK(c["message"]["content"].is_null());
        REQUIRE(c["message"]["tool_calls"].size() == 1);
        check_weather_call(c["message"]["tool_calls"][0]);
    }
}

TEST_CASE("server tools: streamed calls arrive as tool_calls deltas equal to the whole answer", "[server][tool_calls]") {
    TestServer s({.n_ctx = 2048});
    const std::string body = chat(R"("tools":)" + kTools + R"(,"tool_choice":"required","temperature":0)");
    const Reply whole = post(s, "/v1/chat/completions", body);
    REQUIRE(whole.status == 200);
    json want = whole.j["choices"][0]["message"]["tool_calls"];
    REQUIRE(!want.empty());
    for (json& c : want) c.erase("id");  // ids name the request
    const Reply r = post(s, "/v1/chat/completions", body.substr(0, body.size() - 1) + R"(,"stream":true})");
    REQUIRE(r.status == 200);
    json got = json::array();
    std::string finish;
    for (const json& e : sse_events(r.body)) {
        if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) continue;
        const json& ch = e["choices"][0];
        if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
        if (!ch["delta"].contains("tool_calls")) continue;
        for (json c : ch["delta"]["tool_calls"]) {
            CHECK(c["index"] == got.size());
            CHECK(c["id"].get<std::string>().starts_with("call_"));
            c.erase("index");
            c.erase("id");
            got.push_back(c);
        }
    }
    CHECK(finish == "tool_calls");
    CHECK(got == want);
}

TEST_CASE("server tools: tool_choice none and auto", "[server][tool_calls]") {
    TestServer s({.n_ctx = 2048});
    // none: no tools in the prompt, nothing parsed.
    const Reply none = post(s, "/v1/chat/completions", chat(R"("tools":)" + kTools + R"(,"tool_choice":"none","temperature":0)"));
    const Reply plain = post(s, "/v1/chat/completions", chat(R"("temperature":0)"));
    REQUIRE(none.status == 200);
    CHECK(none.j["usage"]["prompt_tokens"] == plain.j["usage"]["prompt_tokens"]);
    // auto: the tools are in the prompt (the model's template renders them).
    const Reply with = post(s, "/v1/chat/completions", chat(R"("tools":)" + kTools + R"(,"temperature":0)"));
    REQUIRE(with.status == 200);
    CHECK(with.j["usage"]["prompt_tokens"].get<int>() > plain.j["usage"]["prompt_tokens"].get<int>() + 40);
    // A built-in template cannot render tools: a clear 400.
    TestServer b({.chat_template = "qwen3"});
    const Reply r = post(b, "/v1/chat/completions", chat(R"("tools":)" + kTools));
    CHECK(r.status == 400);
    CHECK(r.body.find("does not render tools") != std::string::npos);
}

TEST_CASE("server structured output: json_object and json_schema", "[server][grammar]") {
    TestServer s({.n_ctx = 2048});
    // Any object: its strings are unbounded, so a random model may run to max_tokens;
    // what it wrote is then an object's beginning, else a whole object.
    const Reply o = post(s, "/v1/chat/completions", chat(R"("response_format":{"type":"json_object"},"temperature":0)"));
    INFO(o.body);
    REQUIRE(o.status == 200);
    const std::string obj = o.j["choices"][0]["message"]["content"];
    CHECK(obj.starts_with("{"));
    if (o.j["choices"][0]["finish_reason"] == "stop") CHECK(json::parse(obj).is_object());

    const std::string schema = R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2,3]}},
        "required":["ok","n"],"additionalProperties":false})";
    for (int seed = 1; seed <= 3; ++seed) {
        const Reply r = post(s, "/v1/chat/completions",
                             chat(R"("temperature":1,"seed":)" + std::to_string(seed) +
                                  R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":)" +
                                  schema + "}}"));
        INFO(r.body);
        REQUIRE(r.status == 200);
        const json doc = json::parse(r.j["choices"][0]["message"]["content"].get<std::string>());
        CHECK(doc["ok"].is_boolean());
        CHECK((doc["n"] == 1 || doc["n"] == 2 || doc["n"] == 3));
        CHECK(doc.size() == 2);
    }
    // The grammar field (text form) on completions.
    const Reply g = post(s, "/v1/completions", R"({"prompt":"x","max_tokens":20,"grammar":"root ::= \"yes\" | \"no\""})");
    REQUIRE(g.status == 200);
    const std::string text = g.j["choices"][0]["text"];
    CHECK((text == "yes" || text == "no"));
    // ignore_eos does not run past the grammar's end: the text is complete, and stops.
    const Reply ie = post(s, "/v1/completions",
                          R"({"prompt":"x","max_tokens":50,"ignore_eos":true,"grammar":"root ::= \"yes\" | \"no\""})");
    INFO(ie.body);
    REQUIRE(ie.status == 200);
    CHECK(ie.j["choices"][0]["finish_reason"] == "stop");
    const std::string ie_text = ie.j["choices"][0]["text"];
    CHECK((ie_text == "yes" || ie_text == "no"));
}

TEST_CASE("server structured output: what cannot be enforced is a 400 naming it", "[server][grammar]") {
    TestServer s({.n_ctx = 2048});
    auto err = [&](const std::string& rf) {
        const Reply r = post(s, "/v1/chat/completions", chat(R"("response_format":)" + rf));
        INFO(r.body);
        CHECK(r.status == 400);
        return r.body;
    };
    CHECK(err(R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","contentEncoding":"b"}}})")
              .find("contentEncoding") != std::string::npos);
    CHECK(err(R"({"type":"json_schema","json_schema":{"name":"x","schema":{"type":"number","multipleOf":2}}})")
              .find("multipleOf") != std::string::npos);
    CHECK(err(R"({"type":"xml"})").find("response_format.type") != std::string::npos);
    // Keywords with values of the wrong type: 400s, never an exception past the parser.
    for (const char* schema : {R"({"type":"object","properties":[]})", R"({"type":"object","required":5})",
                               R"({"enum":5})", R"({"$ref":5})", R"({"type":"array","items":"x"})",
                               R"({"type":"string","minLength":"a"})", R"({"type":"string","pattern":5})",
                               R"({"anyOf":{}})", R"({"type":5})", R"({"type":"integer","minimum":"0"})",
                               R"({"type":"object","properties":{"a":3}})", R"({"allOf":[1]})"}) {
        INFO(schema);
        err(std::string(R"({"type":"json_schema","json_schema":{"name":"x","schema":)") + schema + "}}");
    }
    const Reply g = post(s, "/v1/completions", R"({"prompt":"x","grammar":"root ::= undefined_rule"})");
    CHECK(g.status == 400);
    CHECK(g.body.find("undefined_rule") != std::string::npos);
}
