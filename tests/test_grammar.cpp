// Grammars: the text form, compilation, the byte matcher, token masks, and sampling
// under a grammar.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "engine/core/error.h"
#include "engine/sample/compiled_grammar.h"
#include "engine/sample/constrained.h"
#include "engine/sample/grammar.h"
#include "engine/sample/grammar_matcher.h"
#include "engine/text/tokenizer.h"
#include "tests/grammar_helpers.h"

using namespace strata;

namespace {

GrammarMatcher matcher_of(std::string_view text, std::shared_ptr<const TokenVocab> vocab = test::json_test_vocab()) {
    return GrammarMatcher(CompiledGrammar::compile(Grammar::parse(text)), std::move(vocab));
}

// Accepted as a whole sentence of the grammar.
bool matches(std::string_view grammar, std::string_view text) {
    GrammarMatcher m = matcher_of(grammar);
    return m.accept_bytes(text) && m.complete();
}

}  // namespace

TEST_CASE("grammar: the text form parses and prints back", "[grammar]") {
    const char* text = R"(
        root ::= "{" ws item ("," ws item)* "}"   # a comment
        item ::= [a-z_\u00e9]+ ":" ws ( "x"{2} | "y"{1,3} | "z"{2,} | . | [^"\\] )?
        ws   ::= [ \t\n]*
    )";
    const Grammar g = Grammar::parse(text);
    CHECK(g.size() == 3);
    const Grammar again = Grammar::parse(g.to_text());
    CHECK(again.to_text() == g.to_text());
    for (int32_t r = 0; r < g.size(); ++r) CHECK(*again.body(r) == *g.body(r));
}

TEST_CASE("grammar: text errors name the problem and the place", "[grammar]") {
    CHECK_THROWS_WITH(Grammar::parse("root ::= foo"), Catch::Contains("'foo' is used but not defined"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= \"abc"), Catch::Contains("unterminated string"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= [a-"), Catch::Contains("unterminated character class"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= \"\\q\""), Catch::Contains("unknown escape"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= \"a\"\nroot ::= \"b\""), Catch::Contains("defined twice"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= \"a\"{3,1}"), Catch::Contains("line 1"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= (\"a\"\n"), Catch::Contains("line 2"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= [z-a]"), Catch::Contains("backwards"));
    CHECK_THROWS_WITH(Grammar::parse(std::string(500, '(')), Catch::Contains("expected a rule name"));
    CHECK_THROWS_WITH(Grammar::parse("root ::= " + std::string(500, '(')), Catch::Contains("nest deeper"));
    CHECK_THROWS_WITH(CompiledGrammar::compile(Grammar::parse("x ::= \"a\"")), Catch::Contains("no rule 'root'"));
}

TEST_CASE("grammar: left recursion and empty loops are refused at compile time", "[grammar]") {
    CHECK_THROWS_WITH(CompiledGrammar::compile(Grammar::parse("root ::= root \"a\" | \"a\"")),
                      Catch::Contains("left-recursive"));
    CHECK_THROWS_WITH(CompiledGrammar::compile(Grammar::parse("root ::= a\na ::= b? root \"x\"\nb ::= \"b\"")),
                      Catch::Contains("left-recursive"));
    CHECK_THROWS_WITH(CompiledGrammar::compile(Grammar::parse("root ::= (\"\" | \"a\")*")),
                      Catch::Contains("left-recursive"));
    CHECK_NOTHROW(CompiledGrammar::compile(Grammar::parse("root ::= \"a\" root | \"\"")));  // right recursion is fine
    std::string huge = "root ::= r0";
    for (int i = 0; i < 12; ++i) huge += fmt::format(" r{}\nr{} ::= \"a\"{{0,100000}}", i + 1, i);
    huge += "\nr12 ::= \"a\"";
    CHECK_THROWS_WITH(CompiledGrammar::compile(Grammar::parse(huge)), Catch::Contains("elements"));
    Grammar built;
    built.add("root", gram::rep(gram::lit("a"), 0, 1 << 30));
    CHECK_THROWS_WITH(CompiledGrammar::compile(built), Catch::Contains("too many elements"));
}

TEST_CASE("grammar: the matcher accepts sentences and refuses the rest", "[grammar]") {
    const char* g = R"(root ::= "[" (num ("," num)*)? "]"
                       num ::= "-"? [1-9] [0-9]{0,2})";
    CHECK(matches(g, "[]"));
    CHECK(matches(g, "[1,-20,999]"));
    CHECK_FALSE(matches(g, "[1000]"));
    CHECK_FALSE(matches(g, "[01]"));
    CHECK_FALSE(matches(g, "[1,]"));
    CHECK_FALSE(matches(g, "[1"));  // a prefix: accepted, not complete
    GrammarMatcher m = matcher_of(g);
    CHECK(m.accept_bytes("[1"));
    CHECK_FALSE(m.complete());
    CHECK_FALSE(m.accept_bytes("2x"));  // all or nothing: "2" is not taken either
    CHECK(m.accept_bytes("23]"));
    CHECK(m.complete());
}

TEST_CASE("grammar: classes are UTF-8 aware, negated classes exclude characters not bytes", "[grammar]") {
    const char* g = R"(root ::= [^a\u00e9]{2} [\u4e00-\u9fff] .)";
    CHECK(matches(g, "xy\xE4\xB8\xAD\xF0\x9F\x98\x80"));       // xy 中 😀
    CHECK(matches(g, "\xC3\xA8z\xE9\xBE\x8Ex"));               // è z 龎 x
    CHECK_FALSE(matches(g, "\xC3\xA9z\xE4\xB8\xAD."));         // é is excluded
    CHECK_FALSE(matches(g, "xy\xE4\xB8\xAD\xED\xA0\x80"));     // a surrogate is no character
    CHECK_FALSE(matches(g, "xy\xE4\xB8\xAD\xC3"));             // half a character
    CHECK_FALSE(matches(g, "x\xC3\xA9" "b\xE4\xB8\xAD" "."));  // é in the first class
}

TEST_CASE("grammar: deep nesting and long repetitions stay cheap", "[grammar]") {
    GrammarMatcher m = matcher_of(R"(root ::= "[" root? "]")");
    CHECK(m.accept_bytes(std::string(20000, '[')));
    CHECK(m.accept_bytes(std::string(20000, ']')));
    CHECK(m.complete());
    GrammarMatcher r = matcher_of(R"(root ::= "a"{0,50000} "b")");
    CHECK(r.accept_bytes(std::string(50000, 'a')));
    CHECK_FALSE(r.accepts_bytes("a"));
    CHECK(r.accept_bytes("b"));
    CHECK(r.complete());
}

TEST_CASE("grammar: an ambiguous grammar merges its parses", "[grammar]") {
    // Every split of the a's is a parse; equal stacks are one, so this stays linear.
    GrammarMatcher m = matcher_of(R"(root ::= ("a" | "aa" | "a" "a"?)* "b")");
    CHECK(m.accept_bytes(std::string(5000, 'a')));
    CHECK(m.accept_bytes("b"));
    CHECK(m.complete());
}

TEST_CASE("grammar: token checks, masks, end of generation and control tokens", "[grammar]") {
    const auto vocab = test::json_test_vocab();
    const int32_t eog = vocab->size() - 2, ctl = vocab->size() - 1;
    GrammarMatcher m = matcher_of(R"(root ::= "{\"" [a-z]+ "\":" ("true" | "false") "}")", vocab);
    const auto id_of = [&](std::string_view piece) {
        for (int32_t id = 0; id < vocab->size(); ++id)
            if (vocab->piece(id) == piece && vocab->kind(id) == TokenVocab::Kind::Text) return id;
        FAIL("no token " << piece);
        return -1;
    };
    CHECK(m.accepts_token(id_of("{\"")));
    CHECK(m.accepts_token(id_of("{")));
    CHECK_FALSE(m.accepts_token(id_of("\"")));
    CHECK_FALSE(m.accepts_token(eog));
    CHECK_FALSE(m.accepts_token(ctl));
    CHECK_THROWS_WITH(m.accept_token(id_of("}")), Catch::Contains("not allowed"));
    for (const char* piece : {"{\"", "name", "\":", "true"}) m.accept_token(id_of(piece));
    CHECK_FALSE(m.accepts_token(eog));
    CHECK(m.accepts_token(id_of("}")));
    CHECK_FALSE(m.accepts_token(id_of("},")));
    m.accept_token(id_of("}"));
    TokenMask mask;
    m.fill_mask(mask);
    for (int32_t id = 0; id < vocab->size(); ++id) CHECK(mask_allows(mask, id) == (id == eog));
    m.accept_token(eog);
    CHECK(m.finished());
    CHECK_FALSE(m.accepts_token(eog));
}

TEST_CASE("grammar: the trie mask equals per-token checks", "[grammar]") {
    const char* grammars[] = {
        R"(root ::= "{" ws ("\"" [a-z]{1,8} "\":" ws ("true" | "null" | [0-9]+ | "\"" [^"\\]* "\""))? ws "}"
           ws ::= [ \n]{0,3})",
        R"(root ::= ([\u00e0-\u00ff] | [\u4e00-\u4e2f] | "\u20ac" | "ab" | "\\u00e9")+)",
        R"(root ::= "[" root* "]" | "x")",
    };
    for (const char* g : grammars) {
        INFO(g);
        for (uint64_t seed = 1; seed <= 5; ++seed) {
            GrammarMatcher m = matcher_of(g);
            const test::Generated out = test::generate_random(m, seed, 300);
            CHECK(out.mask_mismatches == 0);
        }
    }
}

TEST_CASE("grammar: the vocabulary of a Tokenizer", "[grammar]") {
    TokenizerVocab v;
    v.tokens = {"a", "b", "{", "}", "ab", "<|im_end|>", "<|ctl|>", "Ġx"};  // Ġ: byte-level space
    v.types = {1, 1, 1, 1, 1, 3, 3, 1};
    v.eos = 5;
    const Tokenizer tok = Tokenizer::from_vocab(v);
    const auto vocab = TokenVocab::from_tokenizer(tok);
    CHECK(vocab->kind(5) == TokenVocab::Kind::Eog);
    CHECK(vocab->kind(6) == TokenVocab::Kind::Never);
    CHECK(vocab->piece(7) == " x");
    GrammarMatcher m(CompiledGrammar::compile(Grammar::parse(R"(root ::= "{" [ab]* " x"? "}")")), vocab);
    TokenMask mask;
    m.fill_mask(mask);
    CHECK(mask == TokenMask{0b0000'0100});
    m.accept_token(2);
    m.fill_mask(mask);
    CHECK(mask == TokenMask{0b1001'1011});
    m.accept_token(3);
    m.fill_mask(mask);
    CHECK(mask == TokenMask{0b0010'0000});
}

TEST_CASE("grammar: constrained greedy picks the best allowed token", "[grammar]") {
    const auto vocab = std::make_shared<const TokenVocab>(std::vector<std::string>{"a", "b", "c", ""},
                                                          std::vector<TokenVocab::Kind>{{}, {}, {}, TokenVocab::Kind::Eog});
    GrammarMatcher m(CompiledGrammar::compile(Grammar::parse(R"(root ::= [bc]+)")), vocab);
    Sampler s(SamplingParams{});
    std::vector<float> logits = {5.0f, 1.0f, 2.0f, 9.0f};
    CHECK(sample_constrained(s, m, logits) == 2);
    m.accept_token(2);
    logits = {5.0f, 1.0f, 2.0f, 9.0f};
    CHECK(sample_constrained(s, m, logits) == 3);  // complete now: end of generation allowed
    logits = {5.0f, 1.0f, 0.5f, 0.0f};
    CHECK(sample_constrained(s, m, logits) == 1);  // the model's own pick when allowed
}

TEST_CASE("grammar: a constrained draw follows the restricted distribution exactly", "[grammar]") {
    // p = (0.5, 0.25, 0.25), allowed {1, 2}: the result must be 1 and 2 evenly. Redrawing
    // with the same uniform would give 0.75 / 0.25 (the refused mass sits below token 1).
    const auto vocab = std::make_shared<const TokenVocab>(std::vector<std::string>{"a", "b", "c"}, std::vector<TokenVocab::Kind>{});
    const auto grammar = CompiledGrammar::compile(Grammar::parse(R"(root ::= [bc])"));
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 7;
    Sampler s(sp);
    std::map<int32_t, int> count;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        GrammarMatcher m(grammar, vocab);
        std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
        const int32_t t = sample_constrained(s, m, logits);
        ++count[t];
        s.accept(t);
    }
    CHECK(count[0] == 0);
    CHECK(count[1] / double(n) == Approx(0.5).margin(0.015));
    CHECK(count[2] / double(n) == Approx(0.5).margin(0.015));
}

TEST_CASE("grammar: constrained greedy over whole 64-token words picks what a plain masked scan picks", "[grammar]") {
    // 300 one-letter tokens a..z (repeated) and "!" tokens: the grammar takes letters, so
    // most mask words are full and some are partial; the model prefers a refused "!".
    std::vector<std::string> pieces;
    for (int i = 0; i < 300; ++i) pieces.push_back(i % 37 == 5 ? "!" : std::string(1, static_cast<char>('a' + i % 26)));
    pieces.emplace_back();
    std::vector<TokenVocab::Kind> kinds(pieces.size(), TokenVocab::Kind::Text);
    kinds.back() = TokenVocab::Kind::Eog;
    const auto vocab = std::make_shared<const TokenVocab>(pieces, kinds);
    const auto grammar = CompiledGrammar::compile(Grammar::parse(R"(root ::= [a-z]+)"));
    uint64_t z = 99;
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> logits(pieces.size());
        for (float& v : logits) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            v = static_cast<float>(static_cast<int>(z >> 60));  // 0..15: many ties
        }
        logits[5] = 100.0f;  // "!": refused
        int32_t want = -1;
        for (size_t i = 0; i + 1 < pieces.size(); ++i)
            if (pieces[i] != "!" && (want < 0 || logits[i] > logits[static_cast<size_t>(want)])) want = static_cast<int32_t>(i);
        GrammarMatcher m(grammar, vocab);
        Sampler s(SamplingParams{});
        CHECK(sample_constrained(s, m, logits) == want);
    }
}
