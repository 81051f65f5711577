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

TEST_CASE("sampler: argmax, max_value, top_k_ids and sort_by_logit match plain scans and comparison sorts", "[sample]") {
    // Values from a small set, so ties are common; lengths around the 16-lane blocks.
    uint64_t z = 12345;
    auto next = [&z] {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<int>(z >> 59);  // 0..31
    };
    for (int trial = 0; trial < 300; ++trial) {
        const size_t n = 1 + static_cast<size_t>(trial) % 97 + (trial % 3 == 0 ? 160 : 0);
        std::vector<float> l(n);
        for (float& v : l) {
            const int r = next();
            v = r == 0 ? -INFINITY : r == 1 ? (trial % 2 ? -0.0f : 0.0f) : static_cast<float>(r % 9) - 4.0f;
        }
        INFO("trial " << trial << " n " << n);
        int32_t plain = 0;
        for (size_t i = 1; i < n; ++i)
            if (l[i] > l[static_cast<size_t>(plain)]) plain = static_cast<int32_t>(i);
        CHECK(argmax(l) == plain);
        CHECK(max_value(l) == l[static_cast<size_t>(plain)]);
        {
            std::vector<int32_t> ref(n), got;
            for (size_t i = 0; i < n; ++i) ref[i] = static_cast<int32_t>(i);
            std::sort(ref.begin(), ref.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
            sort_by_logit(l, got);
            CHECK(got == ref);
        }
        for (size_t k : {size_t{1}, size_t{2}, size_t{7}, size_t{40}}) {
            if (k >= n) continue;
            std::vector<int32_t> ref(n), got;
            for (size_t i = 0; i < n; ++i) ref[i] = static_cast<int32_t>(i);
            std::partial_sort(ref.begin(), ref.begin() + static_cast<long>(k), ref.end(), [&](int32_t a, int32_t b) {
                return l[a] > l[b] || (l[a] == l[b] && a < b);
            });
            ref.resize(k);
            top_k_ids(l, k, got);
            CHECK(got == ref);
        }
    }
    // NaNs never win; every value NaN still gives an id.
    std::vector<float> nan = {NAN, 1.0f, NAN, 3.0f, 3.0f};
    CHECK(argmax(nan) == 3);
    std::vector<int32_t> top;
    top_k_ids(nan, 2, top);
    CHECK(top == std::vector<int32_t>{3, 4});
    SamplingParams k;
    k.temperature = 1.0f;
    k.top_k = 2;
    std::vector<float> all_nan(5, NAN), p;
    Sampler(k).probabilities(all_nan, p);  // must not crash
    CHECK(p.size() == 5);
}
