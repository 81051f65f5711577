// ops::attend (kernels/cpu/attention.h): agrees with a double-precision reference for
// every KV cache type, computes exactly the canonical order its header states (so every
// instruction set and layout gives the same bits), and reads the head-major KvCache.
// Also the vector helpers it is built from (simd::hsum, hsum8, exp), ops::swiglu, which
// uses simd::exp too, and the fused GDN step (ops::gdn_step).
#pragma GCC optimize("fp-contract=off")
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "engine/quant/quant.h"
#include "engine/state/kv_cache.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gdn_step.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd_forms.h"
#include "random_helpers.h"

using namespace strata;

namespace {

// n_pos rows of hd values in `type`, `stride` bytes apart (>= one row's bytes).
std::vector<uint8_t> rows(GgmlType type, const std::vector<float>& f, int64_t n_pos, int64_t hd, size_t stride) {
    std::vector<uint8_t> b(stride * static_cast<size_t>(n_pos), 0xAB);
    for (int64_t u = 0; u < n_pos; ++u) quantize_row(type, f.data() + u * hd, b.data() + stride * static_cast<size_t>(u), hd);
    return b;
}

std::vector<float> dequant(GgmlType type, const std::vector<uint8_t>& b, int64_t n_pos, int64_t hd, size_t stride) {
    std::vector<float> f(static_cast<size_t>(n_pos * hd));
    for (int64_t u = 0; u < n_pos; ++u) dequantize_row(type, b.data() + stride * static_cast<size_t>(u), f.data() + u * hd, hd);
    return f;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// A prompt's tokens attend in runs (ops::attend_tokens): every token's result must be the
// floats attend() gives it alone, whatever the run's length, its first token's position
// (chunk edges at 32) or the head count (a partial group of 8 heads).
TEST_CASE("ops::attend_tokens: each token as attend gives it alone", "[attention][determinism]") {
    const int64_t hd = 64, hdv = 96;
    for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0})
        for (const int64_t n_heads : {int64_t{8}, int64_t{6}})
            for (const int64_t n_tok : {1, 3, 4})
                for (const int64_t n_pos0 : {1, 30, 31, 32, 33, 70}) {
                    CAPTURE(type_info(type).name, n_heads, n_tok, n_pos0);
                    const int64_t n_pos = n_pos0 + n_tok - 1, q_stride = 2 * hd, q_tok = n_heads * q_stride + 16;
                    const std::vector<float> q = test::gaussian(static_cast<size_t>(n_tok * q_tok), 11);
                    const std::vector<float> kf = test::gaussian(static_cast<size_t>(n_pos * hd), 12);
                    const std::vector<float> vf = test::gaussian(static_cast<size_t>(n_pos * hdv), 13);
                    const size_t rk = row_bytes(type, hd), rv = row_bytes(type, hdv);
                    const auto kb = rows(type, kf, n_pos, hd, rk), vb = rows(type, vf, n_pos, hdv, rv);
                    const ops::KvRows k{type, kb.data(), rk}, v{type, vb.data(), rv};
                    const int64_t out_tok = n_heads * hdv + 8;
                    std::vector<float> run(static_cast<size_t>(n_tok * out_tok), 7.0f), alone(run.size(), 7.0f);
                    ops::attend_tokens(q.data(), q_tok, q_stride, n_tok, n_heads, hd, hdv, 0.125f, k, v, n_pos0, run.data(),
                                       out_tok, hdv);
                    for (int64_t t = 0; t < n_tok; ++t)
                        ops::attend(q.data() + t * q_tok, q_stride, n_heads, hd, hdv, 0.125f, k, v, n_pos0 + t,
                                    alone.data() + t * out_tok, hdv);
                    REQUIRE(same_bits(run, alone));
                }
}

TEST_CASE("simd::hsum is the fixed pairwise tree", "[attention][determinism]") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> ud(-1e4f, 1e4f);
    for (int it = 0; it < 20000; ++it) {
        float a[simd::kLanes];
        for (auto& x : a) x = ud(rng) * (rng() % 5 == 0 ? 1e-30f : 1.0f);
        const float got = simd::hsum(simd::load(a));
        for (int w = simd::kLanes / 2; w >= 1; w /= 2)
            for (int i = 0; i < w; ++i) a[i] += a[i + w];
        REQUIRE(std::memcmp(&got, &a[0], sizeof got) == 0);
    }
}

TEST_CASE("ops::attend: the canonical order, the reference, any row layout", "[attention][determinism]") {
    // 8 heads: eight heads' dot products at a time; 2: eight positions' at a time; 11: both
    for (const int64_t n_heads : {int64_t{8}, int64_t{2}, int64_t{11}})
        // 160: the weighted sum's four-vector steps (two) and then single vectors (two)
        for (const auto& [hd, hdv] : {std::pair<int64_t, int64_t>{64, 64}, {96, 160}})
            for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0})
                for (int64_t n_pos : {1, 5, 31, 32, 33, 100}) {
                    CAPTURE(type_info(type).name, n_pos, hd, hdv, n_heads);
                    const int64_t q_stride = 2 * hd;  // as a gated model's [query | gate] rows
                    const std::vector<float> q = test::gaussian(static_cast<size_t>(n_heads * q_stride), 1);
                    const std::vector<float> kf = test::gaussian(static_cast<size_t>(n_pos * hd), 2);
                    const std::vector<float> vf = test::gaussian(static_cast<size_t>(n_pos * hdv), 3);
                    const size_t rk = row_bytes(type, hd), rv = row_bytes(type, hdv);
                    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

                    // back to back, and interleaved with three other heads (the old position-major cache)
                    const auto kb = rows(type, kf, n_pos, hd, rk), vb = rows(type, vf, n_pos, hdv, rv);
                    const auto ks = rows(type, kf, n_pos, hd, 4 * rk), vs = rows(type, vf, n_pos, hdv, 4 * rv);
                    std::vector<float> out(static_cast<size_t>(n_heads * hdv)), out_s(out.size());
                    ops::attend(q.data(), q_stride, n_heads, hd, hdv, scale, {type, kb.data(), rk},
                                {type, vb.data(), rv}, n_pos, out.data(), hdv);
                    ops::attend(q.data(), q_stride, n_heads, hd, hdv, scale, {type, ks.data(), 4 * rk},
                                {type, vs.data(), 4 * rv}, n_pos, out_s.data(), hdv);
                    REQUIRE(same_bits(out, out_s));

                    // the canonical order, written plainly (compiled for the baseline instruction set,
                    // while the kernel runs its best clone)
                    const std::vector<float> k = dequant(type, kb, n_pos, hd, rk),
                                             v = dequant(type, vb, n_pos, hdv, rv);
                    std::vector<float> canon(out.size(), 0.0f);
                    const int64_t ld = (n_pos + 15) / 16 * 16;
                    for (int64_t j = 0; j < n_heads; ++j) {
                        std::vector<float> s(static_cast<size_t>(ld), -INFINITY);
                        for (int64_t u = 0; u < n_pos; ++u)
                            s[u] = simd::dot(q.data() + j * q_stride, k.data() + u * hd, hd) * scale;
                        float m[16];
                        for (int l = 0; l < 16; ++l) {
                            m[l] = -INFINITY;
                            for (int64_t i = l; i < ld; i += 16) m[l] = s[i] > m[l] ? s[i] : m[l];
                        }
                        for (int w = 8; w >= 1; w /= 2)
                            for (int i = 0; i < w; ++i) m[i] = m[i + w] > m[i] ? m[i + w] : m[i];
                        simd::vf sum = simd::zero();
                        for (int64_t i = 0; i < ld; i += 16) {
                            const simd::vf e = simd::exp(simd::load(s.data() + i) - simd::splat(m[0]));
                            simd::store(s.data() + i, e);
                            sum += e;
                        }
                        const float inv = 1.0f / simd::hsum(sum);
                        for (int64_t u = 0; u < n_pos; ++u)
                            for (int64_t i = 0; i < hdv; ++i) canon[j * hdv + i] += (s[u] * inv) * v[u * hdv + i];
                    }
                    REQUIRE(same_bits(out, canon));

                    // the mathematical result, in double precision
                    for (int64_t j = 0; j < n_heads; ++j) {
                        std::vector<double> s(static_cast<size_t>(n_pos));
                        double mx = -1e300, sum = 0;
                        for (int64_t u = 0; u < n_pos; ++u) {
                            double d = 0;
                            for (int64_t i = 0; i < hd; ++i)
                                d += static_cast<double>(q[j * q_stride + i]) * k[u * hd + i];
                            s[u] = d * scale;
                            mx = std::max(mx, s[u]);
                        }
                        for (auto& x : s) sum += (x = std::exp(x - mx));
                        for (int64_t i = 0; i < hdv; ++i) {
                            double o = 0;
                            for (int64_t u = 0; u < n_pos; ++u) o += s[u] / sum * v[u * hdv + i];
                            REQUIRE(std::abs(out[j * hdv + i] - o) < 1e-4 * (1.0 + std::abs(o)));
                        }
                    }
                }
}

TEST_CASE("simd::hsum8 is eight simd::hsum", "[attention][determinism]") {
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> ud(-1e4f, 1e4f);
    for (int it = 0; it < 5000; ++it) {
        simd::vf a[8];
        float want[8], got[8];
        for (int j = 0; j < 8; ++j) {
            float x[simd::kLanes];
            for (auto& v : x) v = ud(rng) * (rng() % 5 == 0 ? 1e-30f : 1.0f);
            a[j] = simd::load(x);
            want[j] = simd::hsum(a[j]);
        }
        simd::hsum8(a, got);
        REQUIRE(std::memcmp(want, got, sizeof want) == 0);
    }
}

TEST_CASE("simd::exp: within 2 ulp of exp, the same bits in every lane position", "[attention][determinism]") {
    double worst = 0;
    for (float x = -87.0f; x < 88.5f; x += 0.0137f) {
        float a[16], y[16];
        for (int l = 0; l < 16; ++l) a[l] = x + 1e-4f * static_cast<float>(l);
        simd::store(y, simd::exp(simd::load(a)));
        for (int l = 0; l < 16; ++l) {
            const double ref = std::exp(static_cast<double>(a[l]));
            worst = std::max(worst, std::abs(y[l] - ref) / ref);
            float one[16] = {};
            one[(l * 7) % 16] = a[l];
            float z[16];
            simd::store(z, simd::exp(simd::load(one)));
            REQUIRE(std::memcmp(&z[(l * 7) % 16], &y[l], sizeof(float)) == 0);
        }
    }
    CHECK(worst < 2.5 * 5.97e-8);
    float sp[16] = {-INFINITY, INFINITY, NAN, -100.f, 100.f, 0.f, -0.f, 88.72f, -87.33f, 1.f, -1.f, 1e-30f, -1e-30f, 50.f, -50.f, 88.8f};
    float y[16];
    simd::store(y, simd::exp(simd::load(sp)));
    CHECK(y[0] == 0.0f);
    CHECK(std::isinf(y[1]));
    CHECK(std::isnan(y[2]));
    CHECK(y[3] == 0.0f);
    CHECK(std::isinf(y[4]));
    CHECK(y[5] == 1.0f);
    CHECK(y[6] == 1.0f);
    CHECK(std::isfinite(y[7]));
    CHECK(y[7] > 3.3e38f);
    CHECK(std::isinf(y[15]));
}

TEST_CASE("ops::swiglu: silu(g) * u to 3 ulp, each element on its own", "[attention][determinism]") {
    const int64_t n = 1000;
    const auto g = test::gaussian(static_cast<size_t>(n), 21, 4.0f), u = test::gaussian(static_cast<size_t>(n), 22);
    std::vector<float> y(static_cast<size_t>(n));
    ops::swiglu(g.data(), u.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
        const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
        REQUIRE(std::abs(y[i] - want) <= 3 * 5.97e-8 * std::abs(want) + 1e-30);
    }
    // any split into pieces (the threads' shares) gives the same bits; y may alias g
    for (int64_t cut : {1, 7, 16, 17, 500, 999}) {
        std::vector<float> z = g;
        ops::swiglu(z.data(), u.data(), cut, z.data());
        ops::swiglu(z.data() + cut, u.data() + cut, n - cut, z.data() + cut);
        REQUIRE(same_bits(z, y));
    }
}

TEST_CASE("ops::sigmoid_mul: o * sigmoid(g) to 3 ulp, each element on its own", "[attention][determinism]") {
    const int64_t n = 1000;
    const auto g = test::gaussian(static_cast<size_t>(n), 23, 4.0f), o = test::gaussian(static_cast<size_t>(n), 24);
    std::vector<float> y = o;
    ops::sigmoid_mul(y.data(), g.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        const double want = o[i] / (1.0 + std::exp(-static_cast<double>(g[i])));
        REQUIRE(std::abs(y[i] - want) <= 3 * 5.97e-8 * std::abs(want) + 1e-30);
    }
    // any split into pieces (a head's span of a task) gives the same bits
    for (int64_t cut : {1, 7, 16, 17, 500, 999}) {
        std::vector<float> z = o;
        ops::sigmoid_mul(z.data(), g.data(), cut);
        ops::sigmoid_mul(z.data() + cut, g.data() + cut, n - cut);
        REQUIRE(same_bits(z, y));
    }
    // saturates as the scalar form does: 0 far below, o far above
    const float big[2] = {-200.0f, 200.0f};
    float v[2] = {3.0f, 3.0f};
    ops::sigmoid_mul(v, big, 2);
    CHECK(v[0] == 0.0f);
    CHECK(v[1] == 3.0f);
}

TEST_CASE("ops::conv_silu: the causal conv and silu to 4 ulp, each channel on its own", "[attention][determinism]") {
    // K = 4 (the shuffled sixteen-channel path) and K = 3 (taps one by one), with channel
    // counts that leave a tail of 5 and none.
    for (const int64_t K : {int64_t{4}, int64_t{3}}) {
        for (const int64_t cd : {int64_t{37}, int64_t{64}}) {
            CAPTURE(K, cd);
            const auto X = test::gaussian(static_cast<size_t>(K * cd), 31, 2.0f), w = test::gaussian(static_cast<size_t>(cd * K), 32);
            std::vector<float> y(static_cast<size_t>(cd));
            ops::conv_silu(X.data(), cd, K, w.data(), 0, cd, y.data());
            for (int64_t c = 0; c < cd; ++c) {
                double s = 0, mag = 0;
                for (int64_t j = 0; j < K; ++j) s += double(w[c * K + j]) * X[j * cd + c], mag += std::abs(double(w[c * K + j]) * X[j * cd + c]);
                const double want = s / (1.0 + std::exp(-s));
                // the float sum's rounding (at most K ulp of the terms' magnitudes; silu's slope
                // is under 1.1) and simd::exp's 2 ulp
                REQUIRE(std::abs(y[c] - want) <= 5.97e-8 * (4 * std::abs(want) + 1.1 * double(K) * mag) + 1e-30);
            }
            // any split at whole vectors (the threads' chunks) gives the same bits
            for (int64_t cut : {int64_t{16}, int64_t{32}}) {
                std::vector<float> z(static_cast<size_t>(cd));
                ops::conv_silu(X.data(), cd, K, w.data(), 0, cut, z.data());
                ops::conv_silu(X.data(), cd, K, w.data(), cut, cd, z.data());
                REQUIRE(same_bits(z, y));
            }
        }
    }
}

TEST_CASE("KvCache: head-major rows, each the quantized head", "[attention]") {
    const int64_t n_layers = 2, n_ctx = 40, n_head_kv = 3, hdk = 64, hdv = 32;
    for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0}) {
        CAPTURE(type_info(type).name);
        KvCache kv(host_buffer, n_layers, n_ctx, n_head_kv, hdk, hdv, type);
        const size_t rk = row_bytes(type, hdk), rv = row_bytes(type, hdv);
        REQUIRE(kv.k_stride() == rk);
        REQUIRE(kv.v_stride() == rv);
        REQUIRE(kv.bytes() == static_cast<size_t>(n_layers * n_head_kv * n_ctx) * (rk + rv));
        for (int64_t l = 0; l < n_layers; ++l)
            for (int64_t pos = 0; pos < n_ctx; ++pos) {
                const auto k = test::gaussian(static_cast<size_t>(n_head_kv * hdk), static_cast<uint32_t>(100 * l + pos));
                const auto v = test::gaussian(static_cast<size_t>(n_head_kv * hdv), static_cast<uint32_t>(5000 + 100 * l + pos));
                kv.store(l, pos, k.data(), v.data());
                for (int64_t h = 0; h < n_head_kv; ++h) {
                    std::vector<uint8_t> want_k(rk), want_v(rv);
                    quantize_row(type, k.data() + h * hdk, want_k.data(), hdk);
                    quantize_row(type, v.data() + h * hdv, want_v.data(), hdv);
                    REQUIRE(std::memcmp(kv.k_head(l, h) + pos * rk, want_k.data(), rk) == 0);
                    REQUIRE(std::memcmp(kv.v_head(l, h) + pos * rv, want_v.data(), rv) == 0);
                }
            }
        REQUIRE_THROWS(kv.k_head(n_layers, 0));
        REQUIRE_THROWS(kv.v_head(0, n_head_kv));
        REQUIRE_THROWS(kv.store(0, n_ctx, nullptr, nullptr));
    }
}

// The fused GDN step: the floats of the plain per-row loops it replaced (decay, simd::dot
// with k, delta, update, simd::dot with q), bit for bit, with and without a tail past the
// last 16 lanes.
TEST_CASE("ops::gdn_step: the plain per-row loops, bit for bit", "[attention][determinism]") {
    for (const int64_t dk : {int64_t{128}, int64_t{20}, int64_t{7}}) {
        const int64_t dv = 9;
        const auto q = test::gaussian(static_cast<size_t>(dk), 1), k = test::gaussian(static_cast<size_t>(dk), 2);
        const auto v = test::gaussian(static_cast<size_t>(dv), 3);
        auto M = test::gaussian(static_cast<size_t>(dv * dk), 4), R = M;
        const float e = 0.93f, b = 0.61f;
        std::vector<float> out(static_cast<size_t>(dv)), ref(out.size());
        for (int step = 0; step < 3; ++step) {  // the state carries over
            ops::gdn_step(M.data(), dv, dk, q.data(), k.data(), v.data(), e, b, out.data());
            for (int64_t j = 0; j < dv; ++j) {
                float* row = R.data() + j * dk;
                for (int64_t i = 0; i < dk; ++i) row[i] *= e;
                const float delta = b * (v[j] - simd::dot(row, k.data(), dk));
                for (int64_t i = 0; i < dk; ++i) row[i] += k[i] * delta;
                ref[j] = simd::dot(row, q.data(), dk);
            }
            INFO("dk " << dk << " step " << step);
            CHECK(out == ref);
            CHECK(M == R);
        }
    }
}

// Many tokens with the state's rows outermost (in registers for dk of 32, 64 and 128, in
// memory otherwise), from another buffer or in place: the floats of one gdn_step per token.
TEST_CASE("ops::gdn_steps: one gdn_step per token, bit for bit", "[attention][determinism]") {
    for (const int64_t dk : {int64_t{128}, int64_t{64}, int64_t{32}, int64_t{20}, int64_t{7}})
        for (const int64_t T : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{17}, int64_t{40}})
            for (const int where : {0, 1, 2}) {  // in place, from another buffer, into one 64-byte aligned
                const bool elsewhere = where > 0;
                const int64_t dv = 9, ld = 2 * dk + dv + 3, ldo = dv + 5;  // token rows: q | k | v | padding
                const auto x = test::gaussian(static_cast<size_t>(T * ld), 11);
                std::vector<float> e(static_cast<size_t>(T)), b(e.size());
                for (int64_t t = 0; t < T; ++t) {
                    e[static_cast<size_t>(t)] = 0.9f + 0.005f * static_cast<float>(t % 7);
                    b[static_cast<size_t>(t)] = 0.3f + 0.01f * static_cast<float>(t % 5);
                }
                const auto M0 = test::gaussian(static_cast<size_t>(dv * dk), 12);
                std::vector<float> R = M0, ref(static_cast<size_t>(T * ldo), -1.0f);
                for (int64_t t = 0; t < T; ++t)
                    ops::gdn_step(R.data(), dv, dk, x.data() + t * ld, x.data() + t * ld + dk, x.data() + t * ld + 2 * dk,
                                  e[static_cast<size_t>(t)], b[static_cast<size_t>(t)], ref.data() + t * ldo);
                // Aligned, a window's state written past the caches (gdn_steps streams it).
                std::vector<float> buf(M0.size() + 16, 7.0f), out(ref.size(), -1.0f);
                float* M = buf.data();
                if (where == 2)
                    while (reinterpret_cast<uintptr_t>(M) % 64 != 0) ++M;
                if (!elsewhere) std::copy(M0.begin(), M0.end(), M);
                ops::gdn_steps(elsewhere ? M0.data() : M, M, dv, dk, T, x.data(), x.data() + dk, x.data() + 2 * dk, ld,
                               e.data(), b.data(), out.data(), ldo);
                INFO("dk " << dk << " T " << T << (where == 0 ? " in place" : where == 1 ? " from another buffer" : " aligned"));
                CHECK(out == ref);
                CHECK(std::equal(R.begin(), R.end(), M));
            }
}
