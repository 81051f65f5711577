// matmul: agrees with the double-precision reference for every weight type, and is
// bit-identical whatever the batch size, the thread count and (integer path) the
// instruction set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/quant/blocks.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/matmul_q.h"
#include "kernels/cpu/moe_ffn.h"
#include "kernels/cpu/simd_forms.h"

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
                          GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                          GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::Q6_K,
                          GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::IQ3_XXS, GgmlType::IQ1_S,
                          GgmlType::IQ1_M}) {
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

// Every quantized weight type: the integer path, each with a packed layout.
const GgmlType kIntTypes[] = {GgmlType::Q8_0,   GgmlType::Q4_0,    GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::IQ4_NL, GgmlType::Q2_K,  GgmlType::Q3_K,  GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                              GgmlType::IQ4_XS, GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                              GgmlType::IQ2_S,  GgmlType::IQ1_S,   GgmlType::IQ1_M};

// Weights of the grid formats and Q2_K from random bytes (every grid index, sign pattern,
// shift and scale, not only what the quantizer picks), with finite fp16 super-scales near
// 1/8 (IQ1_M's d spread over its scale words).
Weights random_blocks(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed) {
    std::mt19937 rng(seed);
    Weights w;
    const size_t rb = row_bytes(type, n_in);
    w.bytes.resize(rb * static_cast<size_t>(n_out));
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng());
    const size_t bs = type_info(type).type_size;
    // where the block's fp16 fields are: d first, but for Q2_K (d, dmin at its end)
    const size_t d_at = type == GgmlType::Q2_K ? offsetof(block_q2_K, d) : 0;
    const int n_half = type == GgmlType::Q2_K ? 2 : 1;
    for (size_t off = 0; off < w.bytes.size(); off += bs) {
        const uint16_t d = f32_to_fp16(0.125f * (0.5f + static_cast<float>(rng() % 1000) / 1000.0f));
        if (type != GgmlType::IQ1_M) {
            for (int h = 0; h < n_half; ++h) std::memcpy(&w.bytes[off + d_at + 2 * static_cast<size_t>(h)], &d, 2);
        } else {
            auto& b = *reinterpret_cast<block_iq1_m*>(&w.bytes[off]);
            uint16_t sc[4];
            std::memcpy(sc, b.scales, 8);
            for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0FFF) | ((d >> (4 * k)) & 0xF) << 12);
            std::memcpy(b.scales, sc, 8);
        }
    }
    w.view = {type, w.bytes.data(), n_in, n_out, rb};
    return w;
}

// A packed copy of w's rows (pack_weights) in a 64-byte aligned buffer it owns; view is w
// with packed set.
struct PackedCopy {
    std::vector<uint8_t> buf;
    MatView view;
};
PackedCopy packed_copy(const MatView& w) {
    PackedCopy c{std::vector<uint8_t>(packed_size(w) + 64), w};
    void* dst = c.buf.data() + (64 - reinterpret_cast<uintptr_t>(c.buf.data()) % 64) % 64;
    pack_weights(w, dst);
    c.view.packed = dst;
    return c;
}

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
namespace {
// The largest error / allowed of the integer path's y against matmul_ref (the bound above).
double bound_ratio(ThreadPool& pool, const MatView& w, const std::vector<float>& x, int64_t T) {
    const int64_t n_in = w.n_in, n_out = w.n_out;
    std::vector<float> y(static_cast<size_t>(T * n_out)), yr(y.size()), row(static_cast<size_t>(n_in));
    matmul(pool, w, x.data(), n_in, T, y.data(), n_out);
    matmul_ref(w, x.data(), n_in, T, yr.data(), n_out);
    double worst = 0;  // largest error / allowed
    for (int64_t r = 0; r < n_out; ++r) {
        dequantize_row(w.type, w.row(r), row.data(), n_in);
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
    return worst;
}
}  // namespace

TEST_CASE("matmul: integer path within the activation-quantization bound", "[matmul]") {
    ThreadPool pool(2);
    const int64_t n_in = 512, n_out = 37, T = 5;
    for (GgmlType type : kIntTypes) {
        Weights w = make_weights(type, n_in, n_out, 1);
        auto x = randn(static_cast<size_t>(T * n_in), 2);
        const double worst = bound_ratio(pool, w.view, x, T);
        INFO(type_info(type).name << ": worst error / bound " << worst);
        CHECK(worst <= 1.0);
    }
}

// Blocks of random bytes (random_blocks): every grid index, sign pattern, shift and
// scale, on every instruction set, packed and not, bit-identical to the scalar path and
// within the bound of the reference.
TEST_CASE("matmul: random blocks of the grid formats and Q2_K on every path", "[matmul][determinism]") {
    ThreadPool pool(2);
    const int64_t n_in = 2816, n_out = 21;
    for (GgmlType type : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                          GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::Q2_K}) {
        Weights w = random_blocks(type, n_in, n_out, 41);
        for (const int64_t T : {1, 6}) {
            auto x = randn(static_cast<size_t>(T * n_in), 42);
            std::vector<float> ref(static_cast<size_t>(T * n_out));
            {
                ForceIsa f(kq::Isa::Scalar);
                matmul(pool, w.view, x.data(), n_in, T, ref.data(), n_out);
                const double worst = bound_ratio(pool, w.view, x, T);
                INFO(type_info(type).name << " T " << T << ": worst error / bound " << worst);
                CHECK(worst <= 1.0);
            }
            const PackedCopy packed = packed_copy(w.view);
            for (int isa = 0; isa < kq::kIsaCount; ++isa) {
                if (!kq::available(static_cast<kq::Isa>(isa))) continue;
                ForceIsa f(static_cast<kq::Isa>(isa));
                for (const MatView* v : {static_cast<const MatView*>(&w.view), &packed.view}) {
                    std::vector<float> y(ref.size());
                    matmul(pool, *v, x.data(), n_in, T, y.data(), n_out);
                    INFO(type_info(type).name << " T " << T << " on " << kq::name(static_cast<kq::Isa>(isa))
                                              << (v == &packed.view ? " packed" : ""));
                    CHECK(y == ref);
                }
            }
        }
    }
}

// Packed IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS and IQ2_S where the CPU has AVX-512 VBMI look their grids up by
// byte permutes; AVX-512 CPUs without VBMI gather. Both forms give the same bits (decode, a window,
// partial groups). Nothing to compare on a CPU without VBMI (it runs the gathers).
TEST_CASE("matmul: packed IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS and IQ2_S by byte permutes and by gathers", "[matmul][determinism]") {
    if (!kq::vbmi_usable()) return;
    ThreadPool pool(2);
    for (const GgmlType type : {GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S})
    for (const int64_t n_out : {int64_t{21}, int64_t{130}}) {
        Weights w = make_weights(type, 2048, n_out, 23);
        const PackedCopy packed = packed_copy(w.view);
        for (const int64_t T : {1, 5}) {
            auto x = randn(static_cast<size_t>(T * 2048), 24);
            std::vector<float> by_permutes(static_cast<size_t>(T * n_out)), by_gathers(by_permutes.size());
            matmul(pool, packed.view, x.data(), 2048, T, by_permutes.data(), n_out);
            kq::allow_vbmi(false);
            matmul(pool, packed.view, x.data(), 2048, T, by_gathers.data(), n_out);
            kq::allow_vbmi(true);
            INFO(type_info(type).name << " n_out " << n_out << " T " << T);
            CHECK(by_permutes == by_gathers);
        }
    }
}

TEST_CASE("matmul: integer path bit-identical on every instruction set", "[matmul][determinism]") {
    ThreadPool pool(2);
    const int64_t n_out = 21;  // partial row tiles
    for (GgmlType type : kIntTypes) {
        // 352 = 11 blocks: a partial chunk of 8 blocks at the end of the row; 2816 = 11 super-blocks.
        for (const int64_t n_in : {type_info(type).block_size == 256 ? int64_t{768} : int64_t{352}, int64_t{2816}}) {
            Weights w = make_weights(type, n_in, n_out, 5);
            if (type == GgmlType::Q8_0) {
                // -128 never comes out of the quantizer but is a valid Q8_0 byte; the VNNI
                // path's w + 128 must handle it (it becomes 0).
                auto* b = reinterpret_cast<block_q8_0*>(w.bytes.data());
                b[0].qs[3] = -128;
                b[1].qs[31] = -128;
                b[n_in / 32 + 2].qs[0] = -128;
            }
            for (const int64_t T : {1, 6}) {  // the decode tile (4 x 1) and the 4 x 4 tiles with edges
                auto x = randn(static_cast<size_t>(T * n_in), 6);
                x[7] = 0.0f;  // a block edge case: zeros, and a block that is all zero
                std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
                std::vector<float> ref(static_cast<size_t>(T * n_out));
                {
                    ForceIsa f(kq::Isa::Scalar);
                    matmul(pool, w.view, x.data(), n_in, T, ref.data(), n_out);
                }
                for (int isa = 1; isa < kq::kIsaCount; ++isa) {
                    if (!kq::available(static_cast<kq::Isa>(isa))) continue;
                    ForceIsa f(static_cast<kq::Isa>(isa));
                    std::vector<float> y(ref.size());
                    matmul(pool, w.view, x.data(), n_in, T, y.data(), n_out);
                    INFO(type_info(type).name << " n_in " << n_in << " T " << T << " on " << kq::name(static_cast<kq::Isa>(isa)));
                    CHECK(y == ref);
                }
            }
        }
    }
}

// F16 and BF16 weights are read in their own width and widened in registers: the bits of
// the same product over their rows widened to F32 first (what the path did before, a tile
// of rows dequantized into a buffer), on every vector form, for decode and window tiles,
// partial row tiles, rows past the last whole vector, F16's subnormals and infinities, and
// a view whose rows lie further apart than their bytes.
TEST_CASE("matmul: F16 and BF16 weights give the products of their rows widened to F32", "[matmul][determinism]") {
    struct ResetWidth {
        ~ResetWidth() { simd::force_vector_bits(0); }
    } reset;
    ThreadPool pool(2);
    const int64_t n_out = 23;  // five 4-row tiles and three single rows
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
        for (const int64_t n_in : {int64_t{64}, int64_t{100}, int64_t{2048}}) {
            const size_t rb = row_bytes(type, n_in), stride = rb + 64;
            std::vector<uint8_t> bytes(stride * static_cast<size_t>(n_out), 0xEE);
            std::vector<float> wide(static_cast<size_t>(n_in * n_out));
            auto f = randn(static_cast<size_t>(n_in), 11);
            for (int64_t r = 0; r < n_out; ++r) {
                for (int64_t i = 0; i < n_in; ++i) f[static_cast<size_t>(i)] = f[static_cast<size_t>((i * 7 + r) % n_in)] * 1.01f;
                if (type == GgmlType::F16 && r == 2) {
                    f[1] = 3e-6f;     // an F16 subnormal
                    f[17] = -5e-8f;   // the smallest
                    f[33] = 70000.f;  // rounds to infinity
                }
                uint8_t* row = bytes.data() + stride * static_cast<size_t>(r);
                quantize_row(type, f.data(), row, n_in);
                dequantize_row(type, row, wide.data() + r * n_in, n_in);
            }
            const MatView w{type, bytes.data(), n_in, n_out, stride, nullptr};
            const MatView w32{GgmlType::F32, wide.data(), n_in, n_out, sizeof(float) * static_cast<size_t>(n_in), nullptr};
            for (const int64_t T : {1, 2, 5, 9}) {
                auto x = randn(static_cast<size_t>(T * n_in), 12);
                std::vector<float> first;
                for (int bits : {512, 256, 128}) {
                    if (!simd::runs_vector_bits(bits)) continue;
                    simd::force_vector_bits(bits);
                    std::vector<float> ref(static_cast<size_t>(T * n_out)), y(ref.size());
                    matmul(pool, w32, x.data(), n_in, T, ref.data(), n_out);
                    matmul(pool, w, x.data(), n_in, T, y.data(), n_out);
                    INFO(type_info(type).name << " n_in " << n_in << " T " << T << " in " << bits << "-bit vectors");
                    CHECK(std::memcmp(y.data(), ref.data(), sizeof(float) * y.size()) == 0);
                    if (first.empty()) first = y;
                    CHECK(std::memcmp(y.data(), first.data(), sizeof(float) * y.size()) == 0);  // every form the same
                }
            }
        }
    }
}

// Packed weights (pack_weights: every integer-path type): bit-identical to the rows they
// were packed from, on every instruction set (AMX included where the CPU has it), for
// decode (T = 1) and windows, with a partial last group of 16 rows. Float weights have
// no packed layout.
TEST_CASE("matmul: packed layouts give the unpacked results", "[matmul][determinism]") {
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
        Weights w = make_weights(type, 512, 16, 21);
        INFO(type_info(type).name);
        CHECK(packed_size(w.view) == 0);  // the rows are used as they are
        CHECK_THROWS_AS(pack_weights(w.view, w.bytes.data()), Error);
    }
    for (const GgmlType type : kIntTypes) {
        const bool q8 = type == GgmlType::Q8_0, k = type_info(type).block_size == 256;
        for (const int64_t n_out : {int64_t{16}, int64_t{21}, int64_t{130}}) {
            for (const int64_t n_in : {k ? int64_t{512} : int64_t{352}, int64_t{2048}}) {
                Weights w = make_weights(type, n_in, n_out, 21);
                if (q8) reinterpret_cast<block_q8_0*>(w.bytes.data())[1].qs[5] = -128;
                if (type == GgmlType::Q4_0) reinterpret_cast<block_q4_0*>(w.bytes.data())[1].qs[5] = 0x0F;  // -8 and 7
                if (type == GgmlType::Q6_K) reinterpret_cast<block_q6_K*>(w.bytes.data())[1].scales[3] = -128;
                const size_t unit = q8                          ? sizeof(kq::PackedQ8)
                                    : type == GgmlType::Q4_0    ? sizeof(kq::PackedQ40)
                                    : type == GgmlType::IQ4_NL  ? sizeof(kq::PackedQ40)
                                    : type == GgmlType::Q4_1    ? sizeof(kq::PackedQ41)
                                    : type == GgmlType::Q5_0    ? sizeof(kq::PackedQ50)
                                    : type == GgmlType::Q5_1    ? sizeof(kq::PackedQ51)
                                    : type == GgmlType::Q2_K    ? sizeof(kq::PackedQ2K)
                                    : type == GgmlType::Q3_K    ? sizeof(kq::PackedQ3K)
                                    : type == GgmlType::Q4_K    ? sizeof(kq::PackedQ4K)
                                    : type == GgmlType::Q5_K    ? sizeof(kq::PackedQ5K)
                                    : type == GgmlType::Q6_K    ? sizeof(kq::PackedQ6K)
                                    : type == GgmlType::IQ4_XS  ? sizeof(kq::PackedIQ4XS)
                                    : type == GgmlType::IQ2_XXS ? sizeof(kq::PackedIQ2XXS)
                                    : type == GgmlType::IQ3_S   ? sizeof(kq::PackedIQ3S)
                                    : type == GgmlType::IQ2_XS  ? sizeof(kq::PackedIQ2XS)
                                    : type == GgmlType::IQ2_S   ? sizeof(kq::PackedIQ2S)
                                    : type == GgmlType::IQ1_S   ? sizeof(kq::PackedIQ1S)
                                    : type == GgmlType::IQ1_M   ? sizeof(kq::PackedIQ1M)
                                                                : sizeof(kq::PackedIQ3XXS);
                REQUIRE(packed_size(w.view) == static_cast<size_t>((n_out + 15) / 16 * (n_in / (k ? 256 : 32))) * unit);
                const PackedCopy packed = packed_copy(w.view);
                const MatView& pv = packed.view;
                // 21 and 35: windows where AMX (when the CPU has it) takes 16 tokens at a time
                for (const int64_t T : {1, 2, 3, 6, 21, 35}) {
                    auto x = randn(static_cast<size_t>(T * n_in), 22);
                    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
                    std::vector<float> ref(static_cast<size_t>(T * n_out));
                    {
                        ThreadPool p1(1);
                        ForceIsa f(kq::Isa::Scalar);
                        matmul(p1, w.view, x.data(), n_in, T, ref.data(), n_out);
                    }
                    for (int isa = 0; isa < kq::kIsaCount; ++isa) {
                        if (!kq::available(static_cast<kq::Isa>(isa))) continue;
                        ForceIsa f(static_cast<kq::Isa>(isa));
                        for (int threads : {1, 2, 3}) {
                            ThreadPool pool(threads);
                            std::vector<float> y(ref.size(), -1.0f), yu(ref.size(), -1.0f);
                            matmul(pool, pv, x.data(), n_in, T, y.data(), n_out);
                            matmul(pool, w.view, x.data(), n_in, T, yu.data(), n_out);
                            INFO(type_info(type).name << " n_out " << n_out << " n_in " << n_in << " T " << T << " threads "
                                                      << threads << " on " << kq::name(static_cast<kq::Isa>(isa)));
                            CHECK(y == ref);
                            CHECK(yu == ref);
                        }
                    }
                }
            }
        }
    }
}

// Window tiles (AVX-512 VNNI): the 32-value formats take tiles of up to 8 tokens, the
// window's tokens shared evenly among them (9: 5 + 4, 13: 7 + 6, 17: 6 + 6 + 5), the others
// tiles of 4 with a last one of 5 where one token would be left (5, 9, 13, 17); on other
// instruction sets tiles of 4 and a tail of 1-3. Every width,
// with a pair of groups and a group alone (n_out 45: three groups), gives each token the
// bits it gets alone.
TEST_CASE("matmul: packed windows of every tile width", "[matmul][determinism]") {
    const int64_t n_out = 45;
    for (const GgmlType type : kIntTypes) {
        const int64_t n_in = type_info(type).block_size == 256 ? 512 : 256;
        Weights w = make_weights(type, n_in, n_out, 41);
        const PackedCopy packed = packed_copy(w.view);
        const MatView& pv = packed.view;
        constexpr int64_t kMaxT = 17;
        auto x = randn(static_cast<size_t>(kMaxT * n_in), 42);
        ThreadPool pool(2);
        std::vector<float> alone(static_cast<size_t>(kMaxT * n_out));
        for (int64_t t = 0; t < kMaxT; ++t)
            matmul(pool, pv, x.data() + t * n_in, n_in, 1, alone.data() + t * n_out, n_out);
        for (int64_t T = 2; T <= kMaxT; ++T) {
            std::vector<float> y(static_cast<size_t>(T * n_out), -1.0f);
            matmul(pool, pv, x.data(), n_in, T, y.data(), n_out);
            INFO(type_info(type).name << " T " << T);
            CHECK(std::equal(y.begin(), y.end(), alone.begin()));
        }
    }
}

// Windows over packed weights go through blocks of 16-row groups (as many as fit in about
// 1 MiB) and, per token tile, every group of a block: with long rows a block holds only a
// few groups, so a matrix has several blocks and a partial last one. Same bits as the
// unpacked rows and the scalar path, on every instruction set (AMX's 16-token tiles too).
TEST_CASE("matmul: packed windows in blocks of groups", "[matmul][determinism]") {
    const int64_t n_in = 16384, n_out = 130, T = 21;  // Q8_0: 3 groups per block, 9 groups
    for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K}) {
        Weights w = make_weights(type, n_in, n_out, 31);
        const PackedCopy packed = packed_copy(w.view);
        const MatView& pv = packed.view;
        auto x = randn(static_cast<size_t>(T * n_in), 32);
        std::vector<float> ref(static_cast<size_t>(T * n_out));
        {
            ThreadPool p1(1);
            ForceIsa f(kq::Isa::Scalar);
            matmul(p1, w.view, x.data(), n_in, T, ref.data(), n_out);
        }
        for (int isa = 1; isa < kq::kIsaCount; ++isa) {
            if (!kq::available(static_cast<kq::Isa>(isa))) continue;
            ForceIsa f(static_cast<kq::Isa>(isa));
            for (int threads : {1, 2}) {
                ThreadPool pool(threads);
                std::vector<float> y(ref.size(), -1.0f);
                matmul(pool, pv, x.data(), n_in, T, y.data(), n_out);
                INFO(type_info(type).name << " threads " << threads << " on " << kq::name(static_cast<kq::Isa>(isa)));
                CHECK(y == ref);
            }
        }
    }
}

// Q6_K's per-block sum m0 P0 + m1 P1 at its largest: every weight -32, every sub-scale
// -128, every activation digit pair at 127 * 128 (x constant): 2^31 - 16777216, exact in
// int32 on every path, packed or not, and equal to the reference.
TEST_CASE("matmul: Q6_K at the int32 bound of its per-block sum", "[matmul][determinism]") {
    const int64_t n_in = 512, n_out = 16;
    std::vector<block_q6_K> blocks(static_cast<size_t>(n_out * n_in / 256));
    for (auto& b : blocks) {
        std::memset(b.ql, 0, sizeof b.ql);
        std::memset(b.qh, 0, sizeof b.qh);  // six bits 0: w = -32
        std::memset(b.scales, 0x80, sizeof b.scales);  // -128
        b.d = f32_to_fp16(1.0f / 4096);
    }
    MatView w{GgmlType::Q6_K, blocks.data(), n_in, n_out, sizeof(block_q6_K) * (n_in / 256)};
    const PackedCopy packed = packed_copy(w);
    const MatView& pv = packed.view;
    const std::vector<float> x(static_cast<size_t>(n_in), 1.0f);
    std::vector<float> ref(static_cast<size_t>(n_out));
    matmul_ref(w, x.data(), n_in, 1, ref.data(), n_out);
    REQUIRE(ref[0] == Approx(512.0 * 32 * 128 / 4096).epsilon(1e-6));
    ThreadPool pool(2);
    for (int isa = 0; isa < kq::kIsaCount; ++isa) {
        if (!kq::available(static_cast<kq::Isa>(isa))) continue;
        ForceIsa f(static_cast<kq::Isa>(isa));
        for (const MatView& v : {w, pv}) {
            std::vector<float> y(static_cast<size_t>(n_out));
            matmul(pool, v, x.data(), n_in, 1, y.data(), n_out);
            INFO(kq::name(static_cast<kq::Isa>(isa)) << (v.packed ? " packed" : ""));
            for (const float e : y) CHECK(e == Approx(ref[0]).epsilon(1e-6));
        }
    }
}

// The AVX2 path sums vpmaddubsw's pairs of unsigned weights in int16 over runs of columns
// (dot_cols_u: 8 columns of nibbles, 4 of five-bit values per run of the high digit) before
// widening: every weight at its largest and every digit at its bound (x constant: q = +-127;
// x at 126.5 / 127 of the block's largest: r = 64) is where a run too long would wrap. On
// every instruction set, packed or not, equal to the scalar path.
namespace {
void set_weights_max(GgmlType type, uint8_t* bytes, size_t n_blocks) {
    for (size_t i = 0; i < n_blocks; ++i) {
        switch (type) {
        case GgmlType::Q4_0: std::memset(reinterpret_cast<block_q4_0*>(bytes)[i].qs, 0xFF, 16); break;
        case GgmlType::Q4_1: std::memset(reinterpret_cast<block_q4_1*>(bytes)[i].qs, 0xFF, 16); break;
        case GgmlType::Q5_0: {
            auto& b = reinterpret_cast<block_q5_0*>(bytes)[i];
            std::memset(b.qh, 0xFF, sizeof b.qh), std::memset(b.qs, 0xFF, sizeof b.qs);
            break;
        }
        case GgmlType::Q5_1: {
            auto& b = reinterpret_cast<block_q5_1*>(bytes)[i];
            std::memset(b.qh, 0xFF, sizeof b.qh), std::memset(b.qs, 0xFF, sizeof b.qs);
            break;
        }
        case GgmlType::Q2_K: std::memset(reinterpret_cast<block_q2_K*>(bytes)[i].qs, 0xFF, 64); break;
        case GgmlType::Q3_K: {
            auto& b = reinterpret_cast<block_q3_K*>(bytes)[i];
            std::memset(b.hmask, 0xFF, sizeof b.hmask), std::memset(b.qs, 0xFF, sizeof b.qs);
            break;
        }
        case GgmlType::Q4_K: std::memset(reinterpret_cast<block_q4_K*>(bytes)[i].qs, 0xFF, 128); break;
        case GgmlType::Q5_K: {
            auto& b = reinterpret_cast<block_q5_K*>(bytes)[i];
            std::memset(b.qh, 0xFF, sizeof b.qh), std::memset(b.qs, 0xFF, sizeof b.qs);
            break;
        }
        default: FAIL("no case for " << type_info(type).name);
        }
    }
}
}  // namespace

TEST_CASE("matmul: unsigned weights at their largest against digits at their bounds", "[matmul][determinism]") {
    const int64_t n_in = 512, n_out = 21, T = 3;
    std::vector<float> x(static_cast<size_t>(T * n_in));
    for (int64_t i = 0; i < n_in; ++i) {
        x[static_cast<size_t>(i)] = 1.0f;                                            // q = 127, r = 0
        x[static_cast<size_t>(n_in + i)] = -1.0f;                                    // q = -127
        x[static_cast<size_t>(2 * n_in + i)] = i % 32 == 0 ? 1.0f : 126.5f / 127.0f;  // q = 126, r = 64
    }
    ThreadPool pool(2);
    for (const GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,
                                GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K}) {
        Weights w = make_weights(type, n_in, n_out, 41);
        set_weights_max(type, w.bytes.data(), w.bytes.size() / type_info(type).type_size);
        const PackedCopy packed = packed_copy(w.view);
        // each token alone (the decode tile), then the three as a window
        for (const auto& [t0, t] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {2, 1}, {0, T}}) {
            std::vector<float> ref(static_cast<size_t>(t * n_out));
            {
                ForceIsa f(kq::Isa::Scalar);
                matmul(pool, w.view, x.data() + t0 * n_in, n_in, t, ref.data(), n_out);
            }
            for (int isa = 1; isa < kq::kIsaCount; ++isa) {
                if (!kq::available(static_cast<kq::Isa>(isa))) continue;
                ForceIsa f(static_cast<kq::Isa>(isa));
                for (const MatView& v : {w.view, packed.view}) {
                    std::vector<float> y(ref.size(), -1.0f);
                    matmul(pool, v, x.data() + t0 * n_in, n_in, t, y.data(), n_out);
                    INFO(type_info(type).name << " tokens " << t0 << " + " << t << " on " << kq::name(static_cast<kq::Isa>(isa)) << (v.packed ? " packed" : ""));
                    CHECK(y == ref);
                }
            }
        }
    }
}

// The activation quantizer's AVX-512 version (used where the CPU has it) writes the same
// bytes as the scalar one, on ordinary values and on the edge cases: zeros, a whole zero
// block, NaN, infinities, ties of the rounding, subnormals, huge values.
TEST_CASE("act_quant: the vector quantizer writes the scalar quantizer's bytes", "[matmul][determinism]") {
    const int64_t n = 32 * 12, T = 3;
    auto x = randn(static_cast<size_t>(T * n), 9);
    for (size_t i = 0; i < x.size(); i += 7) x[i] *= 1000.0f;
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // block 2: all zero
    x[100] = std::nanf("");
    x[130] = INFINITY;
    x[170] = -INFINITY;
    x[171] = std::nanf("");
    for (int i = 0; i < 32; ++i) x[static_cast<size_t>(192 + i)] = static_cast<float>(i - 16) * 0.5f;  // ties
    x[230] = 1e-40f;  // subnormal
    x[260] = 3e38f;
    x[261] = -3e38f;
    for (int i = 0; i < 32; ++i) x[static_cast<size_t>(320 + i)] = 1e-42f * static_cast<float>(i);
    ActQ a, b;
    a.reserve(n, T);
    b.reserve(n, T);
    for (int64_t t = 0; t < T; ++t) {
        quantize_act_token(x.data() + t * n, t, a);
        quantize_act_token_scalar(x.data() + t * n, t, b);
    }
    CHECK(std::equal(a.q.begin(), a.q.begin() + T * n, b.q.begin()));
    CHECK(std::equal(a.r.begin(), a.r.begin() + T * n, b.r.begin()));
    CHECK(std::equal(a.s.begin(), a.s.begin() + T * a.nb, b.s.begin()));
    CHECK(std::equal(a.c.begin(), a.c.begin() + 8 * T * a.nb, b.c.begin()));
    CHECK(std::equal(a.h.begin(), a.h.begin() + 2 * T * a.nb, b.h.begin()));
    for (int64_t i = 0; i < T * a.nb; ++i) {  // bit patterns: NaN != NaN
        uint32_t da, db;
        std::memcpy(&da, &a.d[static_cast<size_t>(i)], 4);
        std::memcpy(&db, &b.d[static_cast<size_t>(i)], 4);
        CHECK(da == db);
    }
    // c holds minus the four-value sums of 128 q + r, h minus the half-block sums, s the
    // block sums.
    for (int64_t t = 0; t < T; ++t)
        for (int64_t blk = 0; blk < a.nb; ++blk) {
            int32_t total = 0, half[2] = {0, 0};
            for (int l = 0; l < 8; ++l) {
                int32_t g = 0;
                for (int64_t i = 32 * blk + 4 * l; i < 32 * blk + 4 * l + 4; ++i) g += 128 * a.qt(t)[i] + a.rt(t)[i];
                CHECK(a.ct(t)[8 * blk + l] == -g);
                total += g;
                half[l / 4] += g;
            }
            CHECK(a.st(t)[blk] == total);
            CHECK(a.ht(t)[2 * blk] == -half[0]);
            CHECK(a.ht(t)[2 * blk + 1] == -half[1]);
        }
}

// matmul_multi: the results of one matmul per weight, bit for bit, for integer and f32
// weights mixed, on every thread count and window size.
TEST_CASE("matmul_multi: the same results as one matmul per weight", "[matmul][determinism]") {
    const int64_t n_in = 512;
    std::vector<Weights> ws;
    ws.push_back(make_weights(GgmlType::Q8_0, n_in, 45, 11));
    ws.push_back(make_weights(GgmlType::Q4_K, n_in, 8, 12));
    ws.push_back(make_weights(GgmlType::Q6_K, n_in, 130, 13));
    ws.push_back(make_weights(GgmlType::F16, n_in, 19, 14));
    ws.push_back(make_weights(GgmlType::Q8_0, n_in, 70, 16));
    const PackedCopy packed = packed_copy(ws.back().view);
    ws.back().view = packed.view;
    std::swap(ws[3], ws[4]);  // integer types (one packed) first, then the f16 one
    for (const bool with_f16 : {false, true}) {
        const size_t nw = with_f16 ? 5 : 4;
        for (const int64_t T : {1, 5}) {
            auto x = randn(static_cast<size_t>(T * n_in), 15);
            for (int threads : {1, 2, 3}) {
                ThreadPool pool(threads);
                std::vector<std::vector<float>> one(nw), multi(nw);
                std::vector<MatOut> outs;
                for (size_t i = 0; i < nw; ++i) {
                    const int64_t no = ws[i].view.n_out;
                    one[i].resize(static_cast<size_t>(T * no));
                    multi[i].assign(static_cast<size_t>(T * no), -1.0f);
                    matmul(pool, ws[i].view, x.data(), n_in, T, one[i].data(), no);
                    outs.push_back({ws[i].view, multi[i].data(), no});
                }
                matmul_multi(pool, outs, x.data(), n_in, T);
                INFO("T " << T << " threads " << threads << " f16 " << with_f16);
                for (size_t i = 0; i < nw; ++i) CHECK(multi[i] == one[i]);
            }
        }
    }
}

// matmul_grouped: several inputs of their own widths and token counts, each read by some
// of the weights (an MoE layer's experts), give one matmul per weight, bit for bit; more
// outputs than one parallel run takes (32), an f32-path weight among them.
TEST_CASE("matmul_grouped: the same results as one matmul per weight and input", "[matmul][determinism]") {
    std::vector<Weights> ws;
    const std::vector<int64_t> widths = {256, 512, 768};
    for (uint32_t i = 0; i < 40; ++i) {
        const GgmlType type = i == 7 ? GgmlType::F16 : i % 3 == 0 ? GgmlType::Q4_K : i % 3 == 1 ? GgmlType::Q8_0 : GgmlType::Q6_K;
        ws.push_back(make_weights(type, widths[i % 3], 16 + 5 * (i % 7), 100 + i));
    }
    std::vector<PackedCopy> packed;
    packed.reserve(ws.size());
    for (size_t i = 0; i < ws.size(); i += 2)
        if (ws[i].view.type != GgmlType::F16) {
            packed.push_back(packed_copy(ws[i].view));
            ws[i].view = packed.back().view;
        }
    // Input j: width widths[j % 3], T_j tokens (0 included: nothing to do for its weights).
    const std::vector<int64_t> toks = {1, 3, 2, 5, 0, 1};
    std::vector<std::vector<float>> xs;
    std::vector<MatIn> ins;
    for (size_t j = 0; j < toks.size(); ++j) {
        const int64_t n_in = widths[j % 3];
        xs.push_back(randn(static_cast<size_t>(std::max<int64_t>(toks[j], 1) * (n_in + 8)), 200 + static_cast<uint32_t>(j)));
        ins.push_back({xs.back().data(), n_in + 8, toks[j]});
    }
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::vector<float>> one(ws.size()), grouped(ws.size());
        std::vector<MatOut> outs;
        std::vector<int> in_of;
        for (size_t i = 0; i < ws.size(); ++i) {
            const size_t j = (i % 3) + 3 * ((i / 3) % 2);  // an input of the weight's width
            const MatIn& x = ins[j];
            const int64_t no = ws[i].view.n_out;
            one[i].assign(static_cast<size_t>(std::max<int64_t>(x.T, 1) * no), -1.0f);
            grouped[i].assign(one[i].size(), -1.0f);
            matmul(pool, ws[i].view, x.x, x.ldx, x.T, one[i].data(), no);
            outs.push_back({ws[i].view, grouped[i].data(), no});
            in_of.push_back(static_cast<int>(j));
        }
        matmul_grouped(pool, ins, outs, in_of);
        INFO("threads " << threads);
        for (size_t i = 0; i < ws.size(); ++i) CHECK(grouped[i] == one[i]);
    }
    ThreadPool pool(1);
    std::vector<float> y(64);
    const MatOut o{ws[0].view, y.data(), 64};
    const int bad = 9;
    CHECK_THROWS(matmul_grouped(pool, ins, std::span<const MatOut>(&o, 1), std::span<const int>(&bad, 1)));
}

// MatIn's gathered (rows) and gated (silu(gate) * x) forms: the same bits as the rows
// written out first, on the integer path (shared and per-thread quantization: 2-row and
// 40-row inputs) and on the f32 path, for 1-3 threads.
TEST_CASE("matmul_grouped: gathered and gated inputs equal their rows written out", "[matmul][moe]") {
    const int64_t n_in = 256, ld = n_in + 32;
    std::vector<Weights> ws;
    ws.push_back(make_weights(GgmlType::Q8_0, n_in, 48, 7));
    ws.push_back(make_weights(GgmlType::Q4_K, n_in, 40, 8));
    ws.push_back(make_weights(GgmlType::F16, n_in, 24, 9));
    const PackedCopy packed = packed_copy(ws[0].view);
    ws.push_back(ws[0]);
    ws.back().view = packed.view;
    const auto x = randn(static_cast<size_t>(12 * ld), 31), gate = randn(static_cast<size_t>(12 * ld), 32);
    for (const int64_t T : {int64_t{2}, int64_t{40}}) {
        std::vector<int32_t> rows(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) rows[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % 12);
        // the same inputs written out: gathered rows; silu(gate) * x of the gathered rows
        std::vector<float> xg(static_cast<size_t>(T * n_in)), xs(xg.size());
        for (int64_t t = 0; t < T; ++t) {
            const float* xr = x.data() + rows[static_cast<size_t>(t)] * ld;
            const float* gr = gate.data() + rows[static_cast<size_t>(t)] * ld;
            std::copy(xr, xr + n_in, xg.data() + t * n_in);
            ops::swiglu(gr, xr, n_in, xs.data() + t * n_in);
        }
        const std::vector<MatIn> forms = {{x.data(), ld, T, rows.data()}, {x.data(), ld, T, rows.data(), gate.data()}};
        const std::vector<MatIn> plain = {{xg.data(), n_in, T}, {xs.data(), n_in, T}};
        for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            for (size_t f = 0; f < forms.size(); ++f) {
                std::vector<MatOut> outs, refs;
                std::vector<std::vector<float>> y(ws.size()), ref(ws.size());
                std::vector<int> in_of(ws.size(), 0);
                for (size_t i = 0; i < ws.size(); ++i) {
                    const int64_t no = ws[i].view.n_out;
                    y[i].assign(static_cast<size_t>(T * no), -1.0f);
                    ref[i].assign(y[i].size(), -2.0f);
                    outs.push_back({ws[i].view, y[i].data(), no});
                    refs.push_back({ws[i].view, ref[i].data(), no});
                }
                matmul_grouped(pool, std::span<const MatIn>(&forms[f], 1), outs, in_of);
                matmul_grouped(pool, std::span<const MatIn>(&plain[f], 1), refs, in_of);
                INFO("T " << T << " threads " << threads << (f ? " gated" : " gathered"));
                for (size_t i = 0; i < ws.size(); ++i) CHECK(y[i] == ref[i]);
            }
        }
    }
}

// moe_ffn: one task per expert gives, bit for bit, what matmul gives for the expert's
// gate and up, SwiGLU, and down, each result row where out_rows puts it (or in order);
// experts of different types (packed Q8_0, Q4_K, F16 on the f32 path) and sizes.
TEST_CASE("moe_ffn: each expert's rows equal its gate, up, SwiGLU and down by matmul", "[matmul][moe]") {
    const int64_t E = 128, ld = E + 16, n_tok = 7;
    const auto h = randn(static_cast<size_t>(n_tok * ld), 41);
    struct Expert {
        Weights gate, up, down;
        std::vector<int32_t> toks, out_rows;
    };
    std::vector<Expert> xs;
    std::vector<PackedCopy> packed;
    packed.reserve(16);
    const GgmlType types[] = {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16, GgmlType::Q6_K};
    for (uint32_t i = 0; i < 6; ++i) {
        const GgmlType type = types[i % 4];
        const int64_t f = type == GgmlType::Q4_K || type == GgmlType::Q6_K ? 256 : 64 + 32 * (i % 3);
        const int64_t e_in = type == GgmlType::Q4_K || type == GgmlType::Q6_K ? 256 : E;
        Expert x{make_weights(type, e_in, f, 50 + i), make_weights(type, e_in, f, 60 + i),
                 make_weights(type, f, e_in, 70 + i), {}, {}};
        if (i == 0)
            for (Weights* w : {&x.gate, &x.up, &x.down}) {
                packed.push_back(packed_copy(w->view));
                w->view = packed.back().view;
            }
        for (int64_t t = 0; t < 1 + static_cast<int64_t>(i % 4); ++t) {
            x.toks.push_back(static_cast<int32_t>((t * 3 + i) % n_tok));
            x.out_rows.push_back(static_cast<int32_t>(i * 4 + t));
        }
        xs.push_back(std::move(x));
    }
    // inputs of width 256 for the K-quant experts: h's rows widened
    std::vector<float> h256(static_cast<size_t>(n_tok * 256));
    for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t c = 0; c < 256; ++c) h256[static_cast<size_t>(t * 256 + c)] = h[static_cast<size_t>(t * ld + c % E)] * (c < E ? 1.0f : 0.5f);
    const int64_t n_out_rows = 6 * 4;
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::vector<float>> ref(xs.size()), got(xs.size());
        std::vector<ExpertFfn> jobs;
        for (size_t i = 0; i < xs.size(); ++i) {
            const Expert& x = xs[i];
            const int64_t e_in = x.gate.view.n_in, f = x.gate.view.n_out, T = static_cast<int64_t>(x.toks.size());
            const float* src = e_in == E ? h.data() : h256.data();
            const int64_t lds = e_in == E ? ld : 256;
            std::vector<float> in(static_cast<size_t>(T * e_in)), g(static_cast<size_t>(T * f)), u(g.size()), m(g.size());
            for (int64_t t = 0; t < T; ++t) std::copy_n(src + x.toks[static_cast<size_t>(t)] * lds, e_in, in.data() + t * e_in);
            matmul(pool, x.gate.view, in.data(), e_in, T, g.data(), f);
            matmul(pool, x.up.view, in.data(), e_in, T, u.data(), f);
            ops::swiglu(g.data(), u.data(), T * f, m.data());
            ref[i].assign(static_cast<size_t>(T * e_in), 0.0f);
            matmul(pool, x.down.view, m.data(), f, T, ref[i].data(), e_in);
            // odd experts scatter into rows of a shared result, even ones write in order
            got[i].assign(static_cast<size_t>((i % 2 ? n_out_rows : T) * e_in), -1.0f);
            jobs.push_back({x.gate.view, x.up.view, x.down.view, {src, lds, T, x.toks.data()}, got[i].data(), e_in,
                            i % 2 ? x.out_rows.data() : nullptr});
        }
        moe_ffn(pool, jobs);
        INFO("threads " << threads);
        for (size_t i = 0; i < xs.size(); ++i) {
            const int64_t e_in = xs[i].gate.view.n_in;
            for (size_t t = 0; t < xs[i].toks.size(); ++t) {
                const int64_t at = i % 2 ? xs[i].out_rows[t] : static_cast<int64_t>(t);
                CHECK(std::equal(ref[i].begin() + static_cast<int64_t>(t) * e_in, ref[i].begin() + static_cast<int64_t>(t + 1) * e_in,
                                 got[i].begin() + at * e_in));
            }
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

// run_each: every index once per run, each on the same thread every time (the caller
// takes 0), through sleeps, and an exception from a worker's index reaches the caller.
TEST_CASE("ThreadPool: run_each runs each index once, on its own thread", "[matmul][threadpool]") {
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::thread::id> owner(static_cast<size_t>(threads));
        pool.run_each([&](int i) { owner[static_cast<size_t>(i)] = std::this_thread::get_id(); });
        CHECK(owner[0] == std::this_thread::get_id());
        for (int rep = 0; rep < 2000; ++rep) {
            if (rep % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin budget
            std::vector<std::atomic<int>> hits(static_cast<size_t>(threads));
            std::atomic<int> moved{0};
            pool.run_each([&](int i) {
                hits[static_cast<size_t>(i)].fetch_add(1);
                if (owner[static_cast<size_t>(i)] != std::this_thread::get_id()) moved.fetch_add(1);
            });
            for (auto& h : hits) CHECK(h.load() == 1);
            CHECK(moved.load() == 0);
        }
        CHECK_THROWS_AS(pool.run_each([&](int i) { if (i == threads - 1) throw std::runtime_error("x"); }),
                        std::runtime_error);
        std::atomic<int> after{0};
        pool.run_each([&](int) { ++after; });
        CHECK(after.load() == threads);
    }
}

// The integer path chosen by name (bench/decode --isa): unknown names and paths the CPU
// does not run are errors; "" goes back to the best one; the choice is what runs.
TEST_CASE("matmul: force_int_path by name", "[matmul]") {
    struct Reset {
        ~Reset() { force_int_path(""); }
    } reset;  // detection again when the test ends, even on failure
    const std::string best = int_path_name();
    CHECK_THROWS_AS(force_int_path("avx1024"), Error);
    CHECK(std::string(int_path_name()) == best);
    force_int_path("scalar");
    CHECK(std::string(int_path_name()) == "scalar");
    // every path by its name: chosen where this CPU runs it, an error where it does not
    for (const char* p : {"avx2", "avx-vnni", "avx512-vnni", "amx"}) {
        INFO(p);
        bool ok = false;
        for (int isa = 0; isa < kq::kIsaCount; ++isa)
            if (std::string(kq::name(static_cast<kq::Isa>(isa))) == p) ok = kq::available(static_cast<kq::Isa>(isa));
        if (ok) {
            force_int_path(p);
            CHECK(std::string(int_path_name()) == p);
        } else {
            CHECK_THROWS_AS(force_int_path(p), Error);
        }
    }
    force_int_path("");
    CHECK(std::string(int_path_name()) == best);
    // decode of packed Q8_0 takes AVX-VNNI beside AVX-512 VNNI on Intel's CPUs (AMD's run
    // the 512-bit kernel faster) unless a path is forced
    __builtin_cpu_init();
    const bool both = kq::detected() >= kq::Isa::Avx512Vnni && kq::available(kq::Isa::AvxVnni) && __builtin_cpu_is("intel");
    CHECK(std::string(int_decode_path_name(GgmlType::Q8_0)) == (both ? "avx-vnni" : best));
    CHECK(std::string(int_decode_path_name(GgmlType::Q4_K)) == best);
    CHECK(std::string(int_decode_path_name(GgmlType::F32)) == "none (f32 path)");
    force_int_path("scalar");
    CHECK(std::string(int_decode_path_name(GgmlType::Q8_0)) == "scalar");
    force_int_path("");
}
