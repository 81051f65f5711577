// Helpers of the grammar tests: a small synthetic vocabulary of multi-byte tokens, and
// a random "model" that generates under a grammar through sample_constrained.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/sample/constrained.h"
#include "engine/sample/grammar_matcher.h"
#include "engine/sample/token_vocab.h"

namespace strata::test {

// Every printable ASCII byte, newline and tab, a few multi-byte characters, and
// multi-character tokens shaped like JSON; then one end-of-generation token and one
// control token (the last two ids).
inline std::shared_ptr<const TokenVocab> json_test_vocab() {
    std::vector<std::string> pieces;
    for (char c = 0x20; c < 0x7f; ++c) pieces.emplace_back(1, c);
    for (const char* t : {"\n", "\t", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "{\"", "\":", "\",", "\"}", "true",
                          "false", "null", "  ", "\n  ", "ab", "name", "\"a", "12", "-1", "0.", "e+", "\\u00e9",
                          "\\\"", "]}", "},", "\"]", "[{", "2024-", "-01", "T12:", ":00Z", "@ex", ".com", "abc", " \"",
                          "\\ud83d\\ude00", "\xE2\x82", "\xAC", "\": ", ", \"", "[]", "{}"})
        pieces.emplace_back(t);
    pieces.emplace_back("");  // end of generation
    pieces.emplace_back("<|ctl|>");
    std::vector<TokenVocab::Kind> kinds(pieces.size(), TokenVocab::Kind::Text);
    kinds[pieces.size() - 2] = TokenVocab::Kind::Eog;
    kinds[pieces.size() - 1] = TokenVocab::Kind::Never;
    return std::make_shared<const TokenVocab>(std::move(pieces), std::move(kinds));
}

inline TokenMask full_mask_by_checks(GrammarMatcher& m) {
    TokenMask mask((static_cast<size_t>(m.vocab().size()) + 63) / 64, 0);
    for (int32_t id = 0; id < m.vocab().size(); ++id)
        if (m.accepts_token(id)) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    return mask;
}

struct Generated {
    std::string text;
    bool finished = false;  // ended with the end-of-generation token
    int mask_mismatches = 0;
};

// Random logits, temperature 1; the longer the text, the more '"' and end of generation
// are favoured, so strings and texts end; tokens made only of closers ('"', '}', ']')
// a little (capped: inside a string they are plain characters that would crowd out the
// ones a pattern needs), so recursive grammars end.
// Every step also compares the trie mask with per-token checks.
inline Generated generate_random(GrammarMatcher& m, uint64_t seed, int max_tokens = 4000) {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = seed;
    Sampler sampler(sp);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, 2.0f);
    const TokenVocab& v = m.vocab();
    Generated out;
    std::vector<float> logits(static_cast<size_t>(v.size()));
    TokenMask mask;
    for (int step = 0; step < max_tokens; ++step) {
        m.fill_mask(mask);
        if (mask != full_mask_by_checks(m)) ++out.mask_mismatches;
        for (int32_t id = 0; id < v.size(); ++id) {
            const std::string_view p = v.piece(id);
            // Ending a string (or the text) first: inside a string "]" is just a character.
            const bool ends = v.kind(id) == TokenVocab::Kind::Eog || p == "\"";
            const bool closes = !p.empty() && p.find_first_not_of("\"}]") == std::string_view::npos;
            const auto t = static_cast<float>(step);
            const float boost = ends ? 0.06f * t : closes ? std::min(0.02f * t, 4.0f) : 0.0f;
            logits[static_cast<size_t>(id)] = noise(rng) + boost;
        }
        const int32_t t = sample_constrained(sampler, m, logits);
        m.accept_token(t);
        sampler.accept(t);
        if (m.finished()) {
            out.finished = true;
            break;
        }
        out.text += v.piece(t);
    }
    return out;
}

}  // namespace strata::test
