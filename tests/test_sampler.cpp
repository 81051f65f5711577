// Sampling: greedy ties, truncations, penalties, and seeded reproducibility.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "engine/sample/sampler.h"

using namespace strata;

TEST_CASE("sampler: greedy picks the argmax, lowest id on ties", "[sample]") {
    Sampler s(SamplingParams{});
    std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
    CHECK(s.sample(l) == 1);
}

TEST_CASE("sampler: top-k, top-p and min-p keep the right sets", "[sample]") {
    const std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.10f)};
    std::vector<float> p;
    SamplingParams k;
    k.temperature = 1.0f;
    k.top_k = 2;
    Sampler(k).probabilities(l, p);
    CHECK(p[0] == Approx(2.0 / 3));
    CHECK(p[1] == Approx(1.0 / 3));
    CHECK(p[2] == 0.0f);
    SamplingParams tp;
    tp.temperature = 1.0f;
    tp.top_p = 0.7f;  // 0.5 + 0.25 reaches 0.7
    Sampler(tp).probabilities(l, p);
    CHECK(p[1] > 0.0f);
    CHECK(p[2] == 0.0f);
    SamplingParams mp;
    mp.temperature = 1.0f;
    mp.min_p = 0.25f;  // keeps p >= 0.125: tokens 0, 1, 2
    Sampler(mp).probabilities(l, p);
    CHECK(p[2] > 0.0f);
    CHECK(p[3] == 0.0f);
    double sum = 0;
    for (float v : p) sum += v;
    CHECK(sum == Approx(1.0));
}

TEST_CASE("sampler: penalties follow llama.cpp and OpenAI", "[sample]") {
    SamplingParams sp;
    sp.repeat_penalty = 2.0f;
    sp.presence_penalty = 0.5f;
    sp.frequency_penalty = 0.25f;
    sp.penalty_last_n = 3;
    Sampler s(sp);
    for (int32_t t : {0, 1, 1, 2}) s.accept(t);  // window keeps 1, 1, 2
    std::vector<float> l = {4.0f, 4.0f, -4.0f, 4.0f};
    s.apply_penalties(l);
    CHECK(l[0] == 4.0f);                        // fell out of the window
    CHECK(l[1] == Approx(2.0f - 0.5f - 0.5f));  // /2, presence, 2 x frequency
    CHECK(l[2] == Approx(-8.0f - 0.5f - 0.25f));
    CHECK(l[3] == 4.0f);
}

TEST_CASE("sampler: seeded draws are reproducible and follow the distribution", "[sample]") {
    SamplingParams sp;
    sp.temperature = 1.0f;
    sp.seed = 42;
    const std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
    Sampler a(sp), b(sp);
    std::map<int32_t, int> count;
    for (int i = 0; i < 20000; ++i) {
        std::vector<float> la = l, lb = l;
        const int32_t x = a.sample(la);
        CHECK(x == b.sample(lb));
        ++count[x];
        // The draw belongs to the position: the next one comes after the token is taken.
        a.accept(x);
        b.accept(x);
    }
    CHECK(count[0] / 20000.0 == Approx(0.6).margin(0.02));
    CHECK(count[1] / 20000.0 == Approx(0.3).margin(0.02));
    CHECK(count[2] / 20000.0 == Approx(0.1).margin(0.02));
}

TEST_CASE("sampler: bad parameters are refused by name", "[sample]") {
    SamplingParams sp;
    sp.top_p = 0.0f;
    CHECK_THROWS_WITH(Sampler(sp), Catch::Contains("top_p"));
    sp = {};
    sp.temperature = -1.0f;
    CHECK_THROWS_WITH(Sampler(sp), Catch::Contains("temperature"));
    sp = {};
    sp.penalty_last_n = -5;
    CHECK_THROWS_WITH(Sampler(sp), Catch::Contains("penalty_last_n"));
}
