// Cost of a constrained sampling step against a free one, at a 150k-token vocabulary.
//
// The vocabulary is synthetic but shaped like a byte-level BPE one: the 256 bytes, then
// random subwords (letters with and without a leading space, digits, punctuation runs,
// JSON-ish pieces, CJK characters). The grammar is a JSON schema's. For several parse
// states it times, per step:
//   free       Sampler::sample (greedy: argmax; temperature 0.8 with top-k 40, with
//              top-p 0.95, and alone: the OpenAI default's full-vocabulary draw);
//   hit        sample_constrained when the model's own pick is allowed (one token check);
//   miss       sample_constrained when it is refused: the full mask, walked over the
//              vocabulary trie (a fresh matcher each time, so no cached mask), then the
//              masked draw;
//   miss (cached)  the same with the mask already cached for that state.
//
// Usage: grammar_bench [vocabulary size, default 150000] [repetitions, default 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/sample/constrained.h"
#include "engine/sample/json_schema.h"

namespace {

using namespace strata;

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<const TokenVocab> bpe_like_vocab(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
    const std::string punct = "{}[]\":,.;!?()-_'/\\*#@&%$<>=+|~`";
    std::geometric_distribution<int> len(0.25);
    const auto pick = [&](const std::string& from) { return from[rng() % from.size()]; };
    while (pieces.size() + 1 < n) {
        std::string p;
        const unsigned kind = rng() % 100;
        if (kind < 70) {  // words, most with a leading space, some capitalized
            if (rng() % 3) p += ' ';
            const int l = 1 + std::min(len(rng), 12);
            for (int i = 0; i < l; ++i) p += pick(letters);
            if (rng() % 8 == 0) p[p[0] == ' ' ? 1 : 0] = static_cast<char>(std::toupper(p[p[0] == ' ' ? 1 : 0]));
        } else if (kind < 78) {
            for (int i = 0, l = 1 + static_cast<int>(rng() % 3); i < l; ++i) p += static_cast<char>('0' + rng() % 10);
        } else if (kind < 90) {
            for (int i = 0, l = 1 + static_cast<int>(rng() % 3); i < l; ++i) p += pick(punct);
            if (rng() % 2) p += pick(letters);
        } else {  // CJK: three-byte characters
            for (int i = 0, l = 1 + static_cast<int>(rng() % 2); i < l; ++i) {
                const uint32_t cp = 0x4E00 + static_cast<uint32_t>(rng() % 0x5000);
                p += static_cast<char>(0xE0 | (cp >> 12));
                p += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                p += static_cast<char>(0x80 | (cp & 0x3F));
            }
        }
        pieces.push_back(std::move(p));
    }
    pieces.emplace_back();  // end of generation
    std::vector<TokenVocab::Kind> kinds(pieces.size(), TokenVocab::Kind::Text);
    kinds.back() = TokenVocab::Kind::Eog;
    return std::make_shared<const TokenVocab>(std::move(pieces), std::move(kinds));
}

// Median microseconds of fn over reps runs (the machine may be shared); setup runs
// before each, untimed.
double time_us(int reps, const std::function<void()>& setup, const std::function<void()>& fn) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        setup();
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        t.push_back(seconds_since(t0));
    }
    std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
    return t[static_cast<size_t>(reps / 2)] * 1e6;
}

int32_t find_piece(const TokenVocab& v, std::string_view piece) {
    for (int32_t id = 0; id < v.size(); ++id)
        if (v.piece(id) == piece) return id;
    std::fprintf(stderr, "no token '%.*s'\n", static_cast<int>(piece.size()), piece.data());
    std::exit(1);
}

struct State {
    const char* name;
    const char* prefix;   // text accepted before the step
    const char* allowed;  // a token the grammar takes here
    const char* refused;  // a token it does not
};

}  // namespace

int main(int argc, char** argv) {
    const size_t n = argc > 1 ? static_cast<size_t>(std::atol(argv[1])) : 150000;
    const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 50;

    auto t0 = std::chrono::steady_clock::now();
    const auto vocab = bpe_like_vocab(n, 42);
    const double build_s = seconds_since(t0);
    const auto schema = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
        "name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
        "tags":{"type":"array","items":{"type":"string","maxLength":20}},"kind":{"enum":["user","admin"]}},
        "required":["name","age","tags","kind"],"additionalProperties":false})");
    const auto grammar = CompiledGrammar::compile(json_schema_to_grammar(schema));
    std::printf("vocabulary: %d tokens (synthetic byte-level BPE shape), trie of %zu nodes built in %.0f ms\n",
                vocab->size(), vocab->trie().size(), build_s * 1e3);
    std::printf("grammar: a 4-property JSON schema, %zu elements; median of %d steps, one thread\n\n",
                grammar->elems.size(), reps);

    std::mt19937 rng(7);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> base(static_cast<size_t>(vocab->size()));
    for (float& x : base) x = gauss(rng);
    std::vector<float> logits;

    SamplingParams greedy_params, temp_params, topp_params, full_params;
    temp_params.temperature = 0.8f;
    temp_params.top_k = 40;
    topp_params.temperature = 0.8f;
    topp_params.top_p = 0.95f;
    full_params.temperature = 0.8f;
    const auto name = [](const SamplingParams& sp) -> const char* {
        if (sp.greedy()) return "greedy";
        if (sp.top_k > 0) return "T=0.8 top-k 40";
        return sp.top_p < 1.0f ? "T=0.8 top-p 0.95" : "T=0.8";
    };
    const State states[] = {
        {"in a string", "{\"name\": \"J", "e", "\x01"},
        {"after '{'", "{", "\"", "x"},
        {"in an integer", "{\"name\": \"J\", \"age\": 1", "2", "a"},
    };
    std::printf("| state | sampler | free us | hit us | hit ratio | miss us (trie walk) | miss ratio | miss cached us | allowed tokens |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const State& st : states) {
        const int32_t good = find_piece(*vocab, st.allowed), bad = find_piece(*vocab, st.refused);
        for (const SamplingParams& sp : {greedy_params, temp_params, topp_params, full_params}) {
            Sampler sampler(sp);
            GrammarMatcher m(grammar, vocab);
            m.accept_bytes(st.prefix);
            // The model's favourite: the allowed token for a hit, the refused one for a miss.
            const auto favour = [&](int32_t id) {
                logits = base;
                logits[static_cast<size_t>(id)] = 50.0f;
            };
            const double free_us = time_us(reps, [&] { favour(good); }, [&] { sampler.sample(logits); });
            const double hit_us = time_us(reps, [&] { favour(good); }, [&] { sample_constrained(sampler, m, logits); });
            TokenMask mask;
            m.fill_mask(mask);  // now cached for this state
            const double cached_us = time_us(reps, [&] { favour(bad); }, [&] { sample_constrained(sampler, m, logits); });
            std::unique_ptr<GrammarMatcher> fresh;
            const double miss_us = time_us(
                std::max(1, reps / 5),
                [&] {
                    favour(bad);
                    fresh = std::make_unique<GrammarMatcher>(grammar, vocab);
                    fresh->accept_bytes(st.prefix);
                },
                [&] { sample_constrained(sampler, *fresh, logits); });
            size_t allowed = 0;
            for (uint64_t w : mask) allowed += static_cast<size_t>(__builtin_popcountll(w));
            std::printf("| %s | %s | %.1f | %.1f | %.3f | %.0f | %.1f | %.1f | %zu |\n", st.name,
                        name(sp), free_us, hit_us, hit_us / free_us, miss_us,
                        miss_us / free_us, cached_us, allowed);
            std::fflush(stdout);
        }
    }
    return 0;
}
