// matmul: agrees with the double-precision reference for every weight type, and is
// bit-identical whatever the batch size, the thread count and (integer path) the
// instruction set.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <random>
#include <vector>

#include "engine/quant/quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_q.h"

using namespace strata;

namespace {

struct Weights {
    std::vector<uint8_t> bytes;
    MatView view;
};

Weights make_weights(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> f(static_cast<size_t>(n_in));
    Weights w;
    const size_t rb = row_bytes(type, n_in);
    w.bytes.resize(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        for (auto& v : f) v = nd(rng);
        quantize_row(type, f.data(), w.bytes.data() + rb * static_cast<size_t>(r), n_in);
    }
    w.view = {type, w.bytes.data(), n_in, n_out, rb};
    return w;
}

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
}

}  // namespace

TEST_CASE("matmul: every type agrees with the reference", "[matmul]") {
    ThreadPool pool(2);
    for (GgmlType type : supported_types()) {
        if (type == GgmlType::Q8_K) continue;  // activation-only format
        if (kq::supported(type)) continue;     // integer path: the next test
        const int64_t n_in = 512, n_out = 37, T = 5;
        Weights w = make_weights(type, n_in, n_out, 1);
        auto x = randn(static_cast<size_t>(T * n_in), 2);
        std::vector<float> y(static_cast<size_t>(T * n_out)), yr(y.size());
        matmul(pool, w.view, x.data(), n_in, T, y.data(), n_out);
        matmul_ref(w.view, x.data(), n_in, T, yr.data(), n_out);
        double max_err = 0;
        for (size_t i = 0; i < y.size(); ++i) max_err = std::max(max_err, std::fabs(double(y[i]) - yr[i]));
        INFO(type_info(type).name << " max abs error " << max_err);
        CHECK(max_err < 1e-3);  // sums of 512 products of O(1) values in f32
    }
}

TEST_CASE("matmul: batch- and thread-count-invariant", "[matmul][determinism]") {
    const int64_t n_in = 320, n_out = 45, T = 9;  // sizes that leave partial tiles
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_0,
                          GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::IQ3_XXS}) {
        INFO(type_info(type).name);
        Weights w = make_weights(type, type_info(type).block_size == 256 ? 512 : n_in, n_out, 3);
        const int64_t ni = w.view.n_in;
        auto x = randn(static_cast<size_t>(T * ni), 4);
        ThreadPool p1(1);
        std::vector<float> all(static_cast<size_t>(T * n_out));
        matmul(p1, w.view, x.data(), ni, T, all.data(), n_out);
        for (int threads : {2, 3}) {
            ThreadPool pn(threads);
            std::vector<float> again(all.size());
            matmul(pn, w.view, x.data(), ni, T, again.data(), n_out);
            CHECK(again == all);
        }
        for (int64_t t = 0; t < T; ++t) {  // each token alone, and in a window of 3 from t
            std::vector<float> one(static_cast<size_t>(n_out));
            matmul(p1, w.view, x.data() + t * ni, ni, 1, one.data(), n_out);
            CHECK(std::equal(one.begin(), one.end(), all.begin() + t * n_out));
            const int64_t win = std::min<int64_t>(3, T - t);
            std::vector<float> part(static_cast<size_t>(win * n_out));
            matmul(p1, w.view, x.data() + t * ni, ni, win, part.data(), n_out);
            CHECK(std::equal(part.begin(), part.end(), all.begin() + t * n_out));
        }
    }
}

namespace {

const GgmlType kIntTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K,
                              GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::IQ3_XXS};

// Restores run-time ISA detection when a test ends, even on failure.
struct ForceIsa {
    explicit ForceIsa(kq::Isa isa) { kq::force(static_cast<int>(isa)); }
    ~ForceIsa() { kq::force(-1); }
};

}  // namespace

// The integer path quantizes each activation block b in two digits to steps of
// d_b = amax_b / (127 * 128), so every x_i is off by at most d_b / 2 and the exact dot
// product with the stored weights moves by at most  E = sum_b (d_b / 2) * sum_{i in b} |w_i|.  The test allows E plus f32
// rounding, 1e-5 * sum |w_i x_i| + 1e-5, on every output.
TEST_CASE("matmul: integer path within the activation-quantization bound", "[matmul]") {
    ThreadPool pool(2);
    const int64_t n_in = 512, n_out = 37, T = 5;
    for (GgmlType type : kIntTypes) {
        Weights w = make_weights(type, n_in, n_out, 1);
        auto x = randn(static_cast<size_t>(T * n_in), 2);
        std::vector<float> y(static_cast<size_t>(T * n_out)), yr(y.size()), row(static_cast<size_t>(n_in));
        matmul(pool, w.view, x.data(), n_in, T, y.data(), n_out);
        matmul_ref(w.view, x.data(), n_in, T, yr.data(), n_out);
        double worst = 0;  // largest error / allowed
        for (int64_t r = 0; r < n_out; ++r) {
            dequantize_row(type, w.view.row(r), row.data(), n_in);
            for (int64_t t = 0; t < T; ++t) {
                const float* xt = x.data() + t * n_in;
                double e = 0, mag = 0;
                for (int64_t b = 0; b < n_in / 32; ++b) {
                    double amax = 0, wabs = 0;
                    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
                        amax = std::max(amax, std::fabs(double(xt[i])));
                        wabs += std::fabs(double(row[i]));
                        mag += std::fabs(double(row[i]) * xt[i]);
                    }
                    e += amax / (127.0 * 128) / 2 * wabs;
                }
                const double err = std::fabs(double(y[t * n_out + r]) - yr[t * n_out + r]);
                worst = std::max(worst, err / (e + 1e-5 * mag + 1e-5));
            }
        }
        INFO(type_info(type).name << ": worst error / bound " << worst);
        CHECK(worst <= 1.0);
    }
}

TEST_CASE("matmul: integer path bit-identical on every instruction set", "[matmul][determinism]") {
    ThreadPool pool(2);
    const int64_t n_out = 21, T = 6;  // partial row and token tiles
    for (GgmlType type : kIntTypes) {
        const int64_t n_in = type_info(type).block_size == 256 ? 768 : 352;
        Weights w = make_weights(type, n_in, n_out, 5);
        auto x = randn(static_cast<size_t>(T * n_in), 6);
        x[7] = 0.0f;  // a block edge case: zeros, and a block that is all zero
        std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
        std::vector<float> ref(static_cast<size_t>(T * n_out));
        {
            ForceIsa f(kq::Isa::Scalar);
            matmul(pool, w.view, x.data(), n_in, T, ref.data(), n_out);
        }
        for (int isa = 1; isa <= static_cast<int>(kq::detected()); ++isa) {
            ForceIsa f(static_cast<kq::Isa>(isa));
            std::vector<float> y(ref.size());
            matmul(pool, w.view, x.data(), n_in, T, y.data(), n_out);
            INFO(type_info(type).name << " on " << kq::name(static_cast<kq::Isa>(isa)));
            CHECK(y == ref);
        }
    }
}

// The pool's spin-then-sleep handshake: many back-to-back runs (workers and caller stay
// spinning), runs after a pause long enough for everyone to fall asleep, and an
// exception, after which the pool still works.
TEST_CASE("ThreadPool: back-to-back runs, runs after sleeping, exceptions", "[matmul][threadpool]") {
    for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(64);
        for (int rep = 0; rep < 20000; ++rep) {
            const int64_t n = 1 + rep % 64;
            pool.run(n, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1, std::memory_order_relaxed); });
        }
        int64_t total = 0;
        for (auto& h : hits) total += h.load();
        CHECK(total == 20000 / 64 * (64 * 65 / 2) + (20000 % 64) * (20000 % 64 + 1) / 2);
        for (int rep = 0; rep < 5; ++rep) {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin budget
            std::atomic<int64_t> sum{0};
            pool.run(100, [&](int64_t t) { sum += t; });
            CHECK(sum.load() == 4950);
        }
        CHECK_THROWS_AS(pool.run(10, [](int64_t t) { if (t == 7) throw std::runtime_error("x"); }),
                        std::runtime_error);
        std::atomic<int> after{0};
        pool.run(10, [&](int64_t) { ++after; });
        CHECK(after.load() == 10);
    }
}
