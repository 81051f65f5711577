// The draft vocabulary's policy (engine/speculative/draft_vocab.*, docs/spec.md "The draft
// vocabulary"): a fixed N is rounded and kept, 0 and N past the vocabulary mean every id,
// auto starts at 4096 ids and doubles only when enough recent committed tokens lie past
// the prefix, never narrows, and depends on the tokens alone (not on how they arrive).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "engine/core/error.h"
#include "engine/speculative/draft_vocab.h"

using namespace strata;

namespace {
void observe(DraftVocab& v, std::initializer_list<int32_t> t) { v.observe(std::span<const int32_t>(t.begin(), t.size())); }
}  // namespace

TEST_CASE("draft vocabulary: fixed settings", "[spec][draft-vocab]") {
    DraftVocab all(32000, 0);
    CHECK(all.rows() == 0);
    observe(all, {31000, 31001, 31002});
    CHECK(all.rows() == 0);

    DraftVocab fixed(32000, 200);  // rounded up to a whole 256
    CHECK(fixed.rows() == 256);
    for (int i = 0; i < 300; ++i) observe(fixed, {31999});  // a fixed N never widens
    CHECK(fixed.rows() == 256);

    CHECK(DraftVocab(32000, 31900).rows() == 0);  // rounds past the vocabulary: every id
    CHECK(DraftVocab(1024, -1).rows() == 0);      // auto on a vocabulary under its start
    CHECK_THROWS_AS(DraftVocab(32000, -2), Error);
}

TEST_CASE("draft vocabulary: auto widens on tokens past its prefix, and only then", "[spec][draft-vocab]") {
    DraftVocab v(151936, -1);
    CHECK(v.rows() == DraftVocab::kAutoStart);
    std::vector<int32_t> low(1000);
    for (size_t i = 0; i < low.size(); ++i) low[i] = static_cast<int32_t>(i * 7 % 4096);
    v.observe(low);
    CHECK(v.rows() == 4096);
    // One token past the prefix is below kMinMisses: kept.
    observe(v, {5000});
    CHECK(v.rows() == 4096);
    // The history is full (256 tokens): 4 of 256 is exactly 1 in 64, not more.
    observe(v, {5001, 5002, 5003});
    CHECK(v.rows() == 4096);
    observe(v, {5004});  // 5 of 256
    CHECK(v.rows() == 8192);
    // Recounted against the wider prefix: those tokens are inside it now.
    observe(v, {9000});
    CHECK(v.rows() == 8192);
    // A run of high ids (another script) widens it step by step to every id.
    std::vector<int32_t> high(40, 150000);
    v.observe(high);
    CHECK(v.rows() == 0);
    // Never narrows.
    v.observe(low);
    CHECK(v.rows() == 0);
}

TEST_CASE("draft vocabulary: a prompt moves auto before the first draft", "[spec][draft-vocab]") {
    DraftVocab v(151936, -1);
    // Ten tokens, two of them around id 20000: 2 >= kMinMisses and 2 * 64 > 10, so the
    // prefix doubles until both are inside (4096 -> 8192 -> 16384 -> 32768).
    observe(v, {1, 2, 20000, 3, 4, 5, 6, 20001, 7, 8});
    CHECK(v.rows() == 32768);
}

TEST_CASE("draft vocabulary: the result depends on the tokens only, not their chunks", "[spec][draft-vocab]") {
    std::mt19937 rng(7);
    std::vector<int32_t> toks(3000);
    for (auto& t : toks) t = static_cast<int32_t>(rng() % 100 < 97 ? rng() % 3000 : 4096 + rng() % 60000);
    DraftVocab whole(151936, -1), pieces(151936, -1);
    whole.observe(toks);
    for (size_t i = 0; i < toks.size();) {
        const size_t n = std::min<size_t>(toks.size() - i, 1 + rng() % 9);
        pieces.observe(std::span<const int32_t>(toks.data() + i, n));
        i += n;
        CHECK(pieces.rows() % 256 == 0);
    }
    CHECK(whole.rows() == pieces.rows());
    CHECK(whole.rows() != DraftVocab::kAutoStart);  // 3% of tokens past 4096: it widened
}
