// Pieces of the server path without HTTP: stop strings held back across tokens,
// the reasoning splitter, a request's stream of events, and the engine's request checks.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "engine/serve/request.h"
#include "engine/serve/stop_strings.h"
#include "engine/split/split_runner.h"
#include "server/reasoning.h"
#include "tests/server_helpers.h"

using namespace strata;

namespace {
Event text(std::string s) {
    Event e;
    e.text = std::move(s);
    return e;
}
Event done_event() {
    Event e;
    e.kind = Event::Kind::Done;
    return e;
}
}  // namespace

TEST_CASE("stop strings: held back across pieces, never emitted", "[server][stop]") {
    StopMatcher m({"</end>", "STOP"});
    std::string out;
    for (const char* piece : {"Hello <", "/en", "d is not STO", "P here"}) out += m.push(piece);
    CHECK(m.stopped());  // "</end" lacks its ">", but "STO" + "P" is STOP
    CHECK(out == "Hello </end is not ");
    StopMatcher a({"</end>"});
    CHECK(a.push("abc </e") == "abc ");
    CHECK(a.push("nx") == "</enx");
    CHECK(a.push("y </en") == "y ");
    CHECK(a.push("d> tail") == "");
    CHECK(a.stopped());
    CHECK(a.flush() == "");
    StopMatcher b({"xyz"});
    CHECK(b.push("ax") == "a");
    CHECK(b.flush() == "x");  // the end of generation releases what was held
}

TEST_CASE("stop strings: earliest match wins", "[server][stop]") {
    StopMatcher m({"bc", "abcd"});
    CHECK(m.push("xxabcd") == "xx");
    CHECK(m.stopped());
}

TEST_CASE("reasoning splitter: <think> blocks go to reasoning", "[server][reasoning]") {
    using strata::server::ReasoningSplitter;
    auto run = [](ReasoningSplitter sp, std::vector<std::string> pieces) {
        std::string r, c;
        for (const auto& p : pieces) {
            auto o = sp.push(p);
            r += o.reasoning;
            c += o.content;
        }
        auto o = sp.flush();
        return std::pair{r + o.reasoning, c + o.content};
    };
    CHECK(run(ReasoningSplitter(true, false), {"<th", "ink>\nI think", " so</th", "ink>\n\nAnswer."}) ==
          std::pair<std::string, std::string>{"I think so", "Answer."});
    CHECK(run(ReasoningSplitter(true, false), {"No", " thinking"}) ==
          std::pair<std::string, std::string>{"", "No thinking"});
    CHECK(run(ReasoningSplitter(true, true), {"deep thought</think>\n\nyes"}) ==
          std::pair<std::string, std::string>{"deep thought", "yes"});
    CHECK(run(ReasoningSplitter(false, false), {"<think>x</think>y"}) ==
          std::pair<std::string, std::string>{"", "<think>x</think>y"});
    CHECK(run(ReasoningSplitter(true, false), {"<think>unfinished"}) ==
          std::pair<std::string, std::string>{"unfinished", ""});
}

// A whole (not streamed) response's reader is woken once, by Done: the text events
// queued before it wait for it, in order, and a reader that times out before Done gets
// the oldest of them. A streamed response's reader gets each event as it comes.
TEST_CASE("request stream: a whole response's reader wakes at Done", "[server][stream]") {
    using namespace std::chrono;
    const Event done = done_event();
    {
        RequestStream st;
        st.wake_at_done();
        std::thread producer([&] {
            st.push(text("a"));
            st.push(text("b"));
            std::this_thread::sleep_for(milliseconds(200));
            st.push(done);
        });
        const auto t0 = steady_clock::now();
        std::optional<Event> e = st.next(seconds(10));
        const auto waited = steady_clock::now() - t0;
        producer.join();
        REQUIRE(e);
        CHECK(e->text == "a");
        CHECK(waited >= milliseconds(150));  // not woken by "a" or "b"
        e = st.next(seconds(10));
        REQUIRE(e);
        CHECK(e->text == "b");
        e = st.next(seconds(10));
        REQUIRE(e);
        CHECK(e->kind == Event::Kind::Done);
        CHECK_FALSE(st.next(milliseconds(1)));
    }
    {
        RequestStream st;
        st.wake_at_done();
        st.push(text("a"));
        const std::optional<Event> e = st.next(milliseconds(20));  // the poll's timeout, no Done yet
        REQUIRE(e);
        CHECK(e->text == "a");
        CHECK_FALSE(st.next(milliseconds(1)));
    }
    {
        RequestStream st;  // streamed: woken by each event
        std::thread producer([&] {
            st.push(text("a"));
            std::this_thread::sleep_for(milliseconds(1500));
            st.push(done);
        });
        const auto t0 = steady_clock::now();
        const std::optional<Event> e = st.next(seconds(10));
        const auto waited = steady_clock::now() - t0;
        producer.join();
        REQUIRE(e);
        CHECK(e->text == "a");
        CHECK(waited < milliseconds(1000));  // woken by "a", not by Done 1.5 s later
    }
}

// A streamed response's reader with pace(gap): the first event is handed over as soon as
// it comes; after that, a take() waits out the gap since the last hand-over, not woken by
// the text events of those milliseconds, and then gets them all at once, in order. Done
// ends the wait early. Without pace, every take() returns at the first event.
TEST_CASE("request stream: a paced reader takes the events of each interval at once", "[server][stream]") {
    using namespace std::chrono;
    const Event done = done_event();
    {
        RequestStream st;
        st.pace(milliseconds(300));
        std::thread producer([&] {
            st.push(text("0"));
            std::this_thread::sleep_for(milliseconds(50));
            for (int i = 1; i <= 5; ++i) st.push(text(std::to_string(i)));
        });
        auto t0 = steady_clock::now();
        std::vector<Event> a = st.take(seconds(10));
        CHECK(steady_clock::now() - t0 < milliseconds(250));  // the first token is not held back
        REQUIRE(a.size() == 1);
        CHECK(a[0].text == "0");
        t0 = steady_clock::now();
        std::vector<Event> b = st.take(seconds(10));
        const auto waited = steady_clock::now() - t0;
        producer.join();
        CHECK(waited >= milliseconds(200));  // not woken by "1" 50 ms in: the rest of the gap
        REQUIRE(b.size() == 5);
        for (int i = 0; i < 5; ++i) CHECK(b[static_cast<size_t>(i)].text == std::to_string(i + 1));
        // Done ends the gap's wait at once, and comes after the text queued before it.
        std::thread ender([&] {
            std::this_thread::sleep_for(milliseconds(20));
            st.push(text("6"));
            st.push(done);
        });
        t0 = steady_clock::now();
        std::vector<Event> c = st.take(seconds(10));
        const auto to_done = steady_clock::now() - t0;
        ender.join();
        CHECK(to_done < milliseconds(250));
        REQUIRE(c.size() == 2);
        CHECK(c[0].text == "6");
        CHECK(c[1].kind == Event::Kind::Done);
        CHECK(st.take(milliseconds(1)).empty());
    }
    {
        RequestStream st;  // no pace: each take() returns at the first event
        st.push(text("a"));
        CHECK(st.take(seconds(10)).size() == 1);
        std::thread producer([&] {
            std::this_thread::sleep_for(milliseconds(20));
            st.push(text("b"));
        });
        const auto t0 = steady_clock::now();
        const std::vector<Event> b = st.take(seconds(10));
        producer.join();
        CHECK(steady_clock::now() - t0 < milliseconds(1000));
        REQUIRE(b.size() == 1);
        CHECK(b[0].text == "b");
    }
}

TEST_CASE("engine: request checks and greedy determinism without HTTP", "[server][engine]") {
    auto model = test::server_model(synth::Arch::Llama);
    Engine e(model, Tokenizer::from_gguf(model->file()), make_local_runner(model, 2, 64, GgmlType::F16),
             EngineOptions{.n_parallel = 2, .queue_limit = 1, .n_batch = 16});
    Request bad;
    CHECK_THROWS_AS(e.submit(bad), EngineError);  // empty prompt
    bad.prompt.assign(64, 1);
    CHECK_THROWS_AS(e.submit(bad), EngineError);  // past the context
    auto run = [&](std::vector<int32_t> prompt) {
        Request r;
        r.prompt = std::move(prompt);
        r.max_tokens = 10;
        r.top_logprobs = 0;  // each token's entry carries its id: the ids are compared, not the text
        auto s = e.submit(std::move(r));
        std::vector<int32_t> ids;
        for (;;) {
            auto ev = s->next(std::chrono::seconds(30));
            REQUIRE(ev);
            for (const TokenLogprob& lp : ev->logprobs) ids.push_back(lp.token);
            if (ev->kind == Event::Kind::Done) {
                CHECK(ev->finish == FinishReason::Length);
                CHECK(ev->usage.completion_tokens == 10);
                return ids;
            }
        }
    };
    const std::vector<int32_t> a = run({1, 2, 3, 4, 5}), b = run({1, 2, 3, 4, 5});
    CHECK(a.size() == 10);
    CHECK(a == b);
}
