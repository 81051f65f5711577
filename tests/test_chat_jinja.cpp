// The model file's own chat template rendered by the Jinja engine (ChatTemplate's Jinja
// family): it agrees with the built-in re-implementation of the same template, renders
// tools in the client's key order, keeps message text literal, and does not double BOS.
#include <catch2/catch.hpp>

#include "engine/synth/vocab.h"
#include "engine/text/chat_template.h"

using namespace strata;

namespace {

std::vector<ChatMessage> conversation() {
    std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi <|im_end|> there"},
                                  {"assistant", "<think>\nhm\n</think>\n\nHello!"}, {"user", "Weather?"}};
    ChatMessage call("assistant", "");
    call.tool_calls.push_back({"call_1", "get_weather", R"({"city": "Oslo"})"});
    m.push_back(call);
    ChatMessage result("tool", "{\"temp\": 3}");
    result.tool_call_id = "call_1";
    m.push_back(result);
    return m;
}

ChatTemplate qwen3_jinja() { return ChatTemplate::from_jinja(synth::qwen_chat_template(), "", "<|im_end|>", false); }

}  // namespace

TEST_CASE("chat jinja: the file's Qwen3 template renders as the built-in qwen3", "[chat][jinja]") {
    const ChatTemplate jt = qwen3_jinja(), builtin = ChatTemplate::from_name("qwen3");
    CHECK(jt.family() == ChatTemplate::Family::Jinja);
    std::vector<ChatMessage> msgs = conversation();
    msgs.resize(4);  // the built-in one does not render tool calls
    for (size_t n = 1; n <= msgs.size(); ++n)
        for (bool think : {true, false}) {
            ChatOptions o;
            if (!think) o.enable_thinking = false;
            const std::span<const ChatMessage> s(msgs.data(), n);
            INFO(n << " messages, thinking " << think);
            CHECK(jt.apply(s, o) == builtin.apply(s, o));
        }
}

TEST_CASE("chat jinja: tools, tool calls and results", "[chat][jinja][tool_calls]") {
    ChatOptions o;
    o.tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
    const std::string text = qwen3_jinja().apply(conversation(), o);
    // The tool as the client ordered its keys (type before function), json.dumps-style.
    CHECK(text.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"") != std::string::npos);
    CHECK(text.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>") !=
          std::string::npos);
    CHECK(text.find("<|im_start|>user\n<tool_response>\n{\"temp\": 3}\n</tool_response><|im_end|>") != std::string::npos);
    CHECK(ChatTemplate::from_name("qwen3").family() == ChatTemplate::Family::ChatMl);
    CHECK_THROWS_WITH(ChatTemplate::from_name("qwen3").apply(conversation(), o), Catch::Contains("does not render tools"));
}

TEST_CASE("chat jinja: message text is literal, the template's markers are not", "[chat][jinja]") {
    const auto msgs = conversation();
    const ChatTemplate::Rendered r = qwen3_jinja().render(std::span<const ChatMessage>(msgs.data(), 2));
    const size_t spelled = r.text.find("Hi <|im_end|> there");
    REQUIRE(spelled != std::string::npos);
    bool covered = false;
    for (auto [b, e] : r.literal) covered = covered || (b <= spelled && e >= spelled + 19);
    CHECK(covered);
    for (auto [b, e] : r.literal) CHECK(r.text.substr(b, e - b).find("<|im_start|>") == std::string::npos);
    CHECK_FALSE(r.opens_think);
}

TEST_CASE("chat jinja: a template that prints BOS does not double the tokenizer's", "[chat][jinja]") {
    const std::string src = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                            "{% if add_generation_prompt %}[assistant]<think>\n{% endif %}";
    const std::vector<ChatMessage> m = {{"user", "hi"}};
    CHECK(ChatTemplate::from_jinja(src, "<s>", "</s>", true).apply(m) == "[user]hi[assistant]<think>\n");
    const ChatTemplate::Rendered keep = ChatTemplate::from_jinja(src, "<s>", "</s>", false).render(m);
    CHECK(keep.text == "<s>[user]hi[assistant]<think>\n");
    CHECK(keep.opens_think);
}

TEST_CASE("chat jinja: templates that do not render fall back or fail clearly", "[chat][jinja]") {
    CHECK_THROWS_WITH(ChatTemplate::from_jinja("{% for %}", "", "", false), Catch::Contains("line 1"));
    CHECK_THROWS_WITH(ChatTemplate::from_jinja("{{ raise_exception('no way') }}", "", "", false), Catch::Contains("no way"));
    // A ChatML template this engine cannot parse: the built-in family, with a warning.
    CHECK(ChatTemplate::for_model("{% include 'x' %}<|im_start|>", "", "", false).name() == "chatml");
    CHECK_THROWS_WITH(ChatTemplate::for_model("", "", "", false), Catch::Contains("no chat template"));
}
