// Tool calls parsed out of streamed model text (engine/text/tool_calls.h): whole and
// piece by piece, the Hermes/Qwen and Llama 3 syntaxes, malformed calls given back as
// text, and the one-call limit.
#include <catch2/catch.hpp>

#include "engine/synth/vocab.h"
#include "engine/text/tool_calls.h"

using namespace strata;

namespace {

struct Result {
    std::string content;
    std::vector<ToolCall> calls;
};

// Feeds text in pieces of `step` bytes (0: all at once), then flushes.
Result run(ToolSyntax syntax, std::string_view text, size_t step, size_t max_calls = SIZE_MAX) {
    ToolCallParser p(syntax, "call_", max_calls);
    Result r;
    auto add = [&](ToolCallParser::Out o) {
        r.content += o.content;
        for (auto& c : o.calls) r.calls.push_back(std::move(c));
    };
    if (step == 0) step = text.size() + 1;
    for (size_t i = 0; i < text.size(); i += step) add(p.push(text.substr(i, step)));
    add(p.flush());
    return r;
}

}  // namespace

TEST_CASE("tool calls: Hermes blocks become calls whatever the pieces", "[tool_calls]") {
    const std::string text =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>";
    for (size_t step : {size_t{0}, size_t{1}, size_t{3}, size_t{7}}) {
        INFO("step " << step);
        const Result r = run(ToolSyntax::Hermes, text, step);
        CHECK(r.content == "Let me check.\n\n");
        REQUIRE(r.calls.size() == 2);
        CHECK(r.calls[0].id == "call_0");
        CHECK(r.calls[0].name == "get_weather");
        CHECK(r.calls[0].arguments == R"({"city":"Paris","days":2})");
        CHECK(r.calls[1].id == "call_1");
        CHECK(r.calls[1].name == "time");
        CHECK(r.calls[1].arguments == "{}");
    }
}

TEST_CASE("tool calls: text that only looks like a tag streams on", "[tool_calls]") {
    ToolCallParser p(ToolSyntax::Hermes, "c");
    CHECK(p.push("a <tool").content == "a ");  // may become <tool_call>: held
    CHECK(p.push("box> b").content == "<toolbox> b");
    CHECK(p.flush().content.empty());
}

TEST_CASE("tool calls: malformed calls are given back as text", "[tool_calls]") {
    for (const std::string bad : {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
                                  "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
                                  "<tool_call>\n[1, 2]\n</tool_call>",
                                  "<tool_call>\n{\"name\": \"f\", \"arguments\": 3}\n</tool_call>"}) {
        INFO(bad);
        const Result r = run(ToolSyntax::Hermes, "x " + bad + " y", 2);
        CHECK(r.calls.empty());
        CHECK(r.content == "x " + bad + " y");
    }
}

TEST_CASE("tool calls: a call cut before its closing tag still counts when whole", "[tool_calls]") {
    Result r = run(ToolSyntax::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a;b\"}}\n", 4);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].arguments == R"({"q":"a;b"})");
    CHECK(r.content.empty());
    r = run(ToolSyntax::Hermes, "<tool_call>\n{\"name\": \"f\", \"argu", 4);  // cut mid-JSON: text
    CHECK(r.calls.empty());
    CHECK(r.content == "<tool_call>\n{\"name\": \"f\", \"argu");
}

TEST_CASE("tool calls: arguments written as a JSON string, and the one-call limit", "[tool_calls]") {
    const std::string two = "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>"
                            "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
    Result r = run(ToolSyntax::Hermes, two, 0);
    REQUIRE(r.calls.size() == 2);
    CHECK(r.calls[0].arguments == "{\"x\": 1}");
    r = run(ToolSyntax::Hermes, two, 5, 1);
    REQUIRE(r.calls.size() == 1);
    CHECK(r.calls[0].name == "a");
    CHECK(r.content.empty());
}

TEST_CASE("tool calls: Llama 3 JSON answers", "[tool_calls]") {
    for (size_t step : {size_t{0}, size_t{1}, size_t{5}}) {
        INFO("step " << step);
        Result r = run(ToolSyntax::Llama3Json, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", step);
        REQUIRE(r.calls.size() == 1);
        CHECK(r.calls[0].name == "get_weather");
        CHECK(r.calls[0].arguments == R"({"city":"Oslo"})");
        CHECK(r.content.empty());

        r = run(ToolSyntax::Llama3Json,
                "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"s\": \"}\"}}",
                step);
        REQUIRE(r.calls.size() == 2);
        CHECK(r.calls[1].arguments == R"({"s":"}"})");

        r = run(ToolSyntax::Llama3Json, "It is sunny.", step);  // an ordinary answer
        CHECK(r.calls.empty());
        CHECK(r.content == "It is sunny.");

        r = run(ToolSyntax::Llama3Json, "{\"not\": \"a call\"}", step);
        CHECK(r.calls.empty());
        CHECK(r.content == "{\"not\": \"a call\"}");
    }
    // Plain text is not held back until the end.
    ToolCallParser p(ToolSyntax::Llama3Json, "c");
    CHECK(p.push("\n").content.empty());
    CHECK(p.push("Hi").content == "\nHi");
}

TEST_CASE("tool calls: the syntax is read from the chat template", "[tool_calls]") {
    CHECK(tool_syntax_of_template(synth::qwen_chat_template()) == ToolSyntax::Hermes);
    CHECK(tool_syntax_of_template("{{ '<|start_header_id|>' }}{{ '\"parameters\": ' }}") == ToolSyntax::Llama3Json);
    CHECK(tool_syntax_of_template("{{ '<|im_start|>' + message.content }}") == ToolSyntax::None);
}
