// Sampling: greedy ties, truncations, penalties, and seeded reproducibility.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "engine/sample/sampler.h"
#include "engine/sample/softmax.h"

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

TEST_CASE("sampler: argmax, max_value and top_k_ids match plain scans and comparison sorts", "[sample]") {
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

namespace {

// Units in the last place between two positive floats.
int64_t ulps(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    return std::abs(static_cast<int64_t>(ia) - ib);
}

// The draw's distribution as defined: every id sorted by logit (descending), double
// exponentials, min-p then top-p as prefixes of that order (top-p's edge taking a tie
// whole).
std::vector<double> reference_probs(const std::vector<float>& l, const SamplingParams& sp) {
    const size_t n = l.size();
    std::vector<int32_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    std::vector<double> p(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp((double(l[idx[i]]) - l[idx[0]]) / sp.temperature));
    size_t keep = n;
    if (sp.min_p > 0) {
        keep = 1;
        while (keep < n && p[keep] >= sp.min_p * p[0]) ++keep;
    }
    if (sp.top_p < 1.0f) {
        double cum = 0;
        size_t k = 0;
        while (k < keep) {
            cum += p[k++] / sum;
            if (cum >= sp.top_p) break;
        }
        while (k < keep && l[idx[k]] == l[idx[k - 1]]) ++k;  // a tie at the edge is kept whole
        keep = k;
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += p[i];
    std::vector<double> out(n, 0.0);
    for (size_t i = 0; i < keep; ++i) out[static_cast<size_t>(idx[i])] = p[i] / kept;
    return out;
}

}  // namespace

TEST_CASE("sampler: the whole-vocabulary exp is within 2 ulp, and its SIMD and scalar forms agree bit for bit",
          "[sample]") {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-90.0f, 0.0f);
    std::vector<float> x(4099), simd(x.size());
    for (float& v : x) v = u(rng);
    x[0] = 0.0f;                           // exp(0) is exactly 1
    x[1] = -std::numeric_limits<float>::infinity();
    x[2] = std::numeric_limits<float>::quiet_NaN();
    x[3] = -87.4f;                         // below FLT_MIN: 0
    for (float t : {1.0f, 0.7f, 1.3f}) {
        INFO("t " << t);
        exp_shifted(x, 0.0f, t, simd.data());
        CHECK(simd[0] == 1.0f);
        CHECK(simd[1] == 0.0f);
        CHECK(simd[2] == 0.0f);
        int64_t worst = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            float one;  // the scalar form: a span shorter than a vector
            exp_shifted(std::span<const float>(&x[i], 1), 0.0f, t, &one);
            REQUIRE(std::memcmp(&one, &simd[i], 4) == 0);
            const double want = std::exp(static_cast<double>(x[i] * (1.0f / t)));
            if (simd[i] == 0.0f) {
                CHECK((!(x[i] * (1.0f / t) >= -87.33654f)));
                continue;
            }
            worst = std::max(worst, ulps(simd[i], static_cast<float>(want)));
        }
        CHECK(worst <= 2);
    }
    // The fixed-order sum: four interleaved partial sums.
    std::vector<float> v(1001);
    for (float& a : v) a = std::abs(u(rng));
    double s4[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < v.size(); ++i) s4[i % 4] += v[i];
    CHECK(sum_fixed(v) == (s4[0] + s4[1]) + (s4[2] + s4[3]));
    size_t count = 0;
    double above = 0;
    for (size_t i = 0; i < v.size(); ++i) s4[i % 4] = 0;
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] >= 40.0f) {
            s4[i % 4] += v[i];
            ++count;
        }
    above = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    size_t got = 0;
    CHECK(sum_at_least(v, 40.0f, &got) == above);
    CHECK(got == count);
}

TEST_CASE("sampler: a draw over the whole vocabulary keeps the defined distribution and truncations", "[sample]") {
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0f, 3.0f);
    for (int trial = 0; trial < 60; ++trial) {
        const size_t n = 1 + static_cast<size_t>(trial) * 211;
        std::vector<float> l(n);
        for (float& v : l) v = trial % 3 == 0 ? std::round(g(rng)) : g(rng);  // ties, or none
        SamplingParams sp;
        sp.temperature = trial % 2 ? 0.8f : 1.5f;
        if (trial % 4 == 1) sp.top_p = 0.9f;
        if (trial % 4 == 2) sp.min_p = 0.05f;
        if (trial % 4 == 3) {
            sp.top_p = 0.5f;
            sp.min_p = 0.01f;
        }
        INFO("trial " << trial << " n " << n << " T " << sp.temperature << " top_p " << sp.top_p << " min_p " << sp.min_p);
        const std::vector<double> ref = reference_probs(l, sp);
        std::vector<float> p;
        std::vector<int32_t> kept;
        Sampler(sp).probabilities(l, p, kept);
        REQUIRE(p.size() == n);
        double sum = 0;
        for (size_t i = 0; i < n; ++i) {
            sum += p[i];
            CHECK((p[i] > 0) == (ref[i] > 0));
            CHECK(std::abs(p[i] - ref[i]) <= 1e-6 * ref[i] + 1e-12);
        }
        CHECK(sum == Approx(1.0).epsilon(1e-6));
        for (size_t j = 0; j < kept.size(); ++j) CHECK(p[static_cast<size_t>(kept[j])] > 0);
        CHECK(kept.size() == static_cast<size_t>(std::count_if(p.begin(), p.end(), [](float v) { return v > 0; })));
    }
    // +inf logits share the mass; only -inf and NaN: the first of them takes it.
    SamplingParams sp;
    sp.temperature = 1.0f;
    std::vector<float> p;
    const float inf = std::numeric_limits<float>::infinity();
    Sampler(sp).probabilities(std::vector<float>{1.0f, inf, 0.0f, inf}, p);
    CHECK(p == std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f});
    Sampler(sp).probabilities(std::vector<float>{-inf, NAN, -inf}, p);
    CHECK(p == std::vector<float>{1.0f, 0.0f, 0.0f});
}

TEST_CASE("sampler: the draw by blocks picks what a plain cumulative scan picks", "[sample]") {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    std::exponential_distribution<float> ex(1.0f);
    for (int trial = 0; trial < 200; ++trial) {
        const size_t n = 1 + static_cast<size_t>(trial) * 37;
        std::vector<float> p(n);
        double total = 0;
        for (size_t i = 0; i < n; ++i) {
            // Runs of zeros (whole blocks of them too), as truncations leave.
            p[i] = (i / 16 + static_cast<size_t>(trial)) % 3 == 0 || i % 5 == 0 ? 0.0f : ex(rng);
            total += p[i];
        }
        if (total == 0) continue;
        for (float& v : p) v = static_cast<float>(v / total);
        for (int d = 0; d < 50; ++d) {
            const double x = d == 0 ? 0.0 : d == 1 ? std::nextafter(1.0, 0.0) : u01(rng);
            double cum = 0;
            int32_t want = 0;
            for (size_t i = 0; i < n; ++i) {
                if (!(p[i] > 0)) continue;
                want = static_cast<int32_t>(i);
                cum += p[i];
                if (x < cum) break;
            }
            INFO("trial " << trial << " u " << x);
            CHECK(sample_index(p, x) == want);
        }
    }
}
