// The float kernels in each vector width this CPU runs (kernels/cpu/simd_forms.h: 512-bit
// vf, 256-bit and 128-bit pieces of it): the same floats, bit for bit, in every form, and
// the forced width is the one that runs.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gdn_step.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd_forms.h"
#include "random_helpers.h"

using namespace strata;

namespace {

struct ResetWidth {
    ~ResetWidth() { simd::force_vector_bits(0); }
};

// The widths this CPU runs, widest first.
std::vector<int> widths() {
    std::vector<int> w;
    for (const int bits : {512, 256, 128})
        if (simd::runs_vector_bits(bits)) w.push_back(bits);
    return w;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// run() once per width; every width's floats must equal the first's.
template <class F>
void same_in_every_form(F run) {
    ResetWidth reset;
    std::vector<float> first;
    for (const int bits : widths()) {
        simd::force_vector_bits(bits);
        REQUIRE(simd::vector_bits() == bits);
        const std::vector<float> got = run();
        INFO(bits << "-bit form");
        if (first.empty()) first = got;
        else CHECK(same_bits(got, first));
    }
}

}  // namespace

TEST_CASE("simd forms: the widths, forced and back", "[simd][determinism]") {
    ResetWidth reset;
    REQUIRE(simd::runs_vector_bits(128));
    const int widest = simd::vector_bits();
    CHECK(simd::runs_vector_bits(widest));
    CHECK_FALSE(simd::runs_vector_bits(1024));
    CHECK_THROWS_AS(simd::force_vector_bits(64), Error);
    simd::force_vector_bits(128);
    CHECK(simd::vector_bits() == 128);
    simd::force_vector_bits(0);
    CHECK(simd::vector_bits() == widest);
    // The benchmarks' --isa narrows the float kernels with the integer path.
    force_int_path("scalar");
    CHECK(simd::vector_bits() == 128);
    force_int_path("");
    CHECK(simd::vector_bits() == widest);
}

TEST_CASE("simd forms: dot, swiglu and the GDN conv", "[simd][determinism]") {
    for (const int64_t n : {int64_t{16}, int64_t{128}, int64_t{133}, int64_t{7}}) {
        const auto a = test::gaussian(static_cast<size_t>(n), 1), b = test::gaussian(static_cast<size_t>(n), 2);
        CAPTURE(n);
        same_in_every_form([&] { return std::vector<float>{ops::dot(a.data(), b.data(), n)}; });
        same_in_every_form([&] {
            std::vector<float> y(static_cast<size_t>(n));
            ops::swiglu(a.data(), b.data(), n, y.data());
            return y;
        });
    }
    for (const int64_t K : {int64_t{4}, int64_t{3}}) {
        const int64_t cd = 53;  // three whole vectors and a tail of 5 channels
        const auto X = test::gaussian(static_cast<size_t>(K * cd), 3), w = test::gaussian(static_cast<size_t>(K * cd), 4);
        CAPTURE(K);
        same_in_every_form([&] {
            std::vector<float> y(static_cast<size_t>(cd));
            ops::conv_silu(X.data(), cd, K, w.data(), 0, cd, y.data());
            return y;
        });
    }
}

TEST_CASE("simd forms: the GDN recurrence", "[simd][determinism]") {
    for (const int64_t dk : {int64_t{128}, int64_t{64}, int64_t{32}, int64_t{20}})
        for (const int64_t T : {int64_t{1}, int64_t{3}, int64_t{17}}) {
            const int64_t dv = 11, ld = 2 * dk + dv;  // 11 rows: whole groups and a remainder
            const auto x = test::gaussian(static_cast<size_t>(T * ld), 5), M0 = test::gaussian(static_cast<size_t>(dv * dk), 6);
            std::vector<float> e(static_cast<size_t>(T), 0.93f), b(static_cast<size_t>(T), 0.4f);
            CAPTURE(dk, T);
            same_in_every_form([&] {
                std::vector<float> M(M0.size()), out(static_cast<size_t>(T * dv));
                ops::gdn_steps(M0.data(), M.data(), dv, dk, T, x.data(), x.data() + dk, x.data() + 2 * dk, ld, e.data(),
                               b.data(), out.data(), dv);
                out.insert(out.end(), M.begin(), M.end());
                return out;
            });
            same_in_every_form([&] {
                std::vector<float> M = M0, out(static_cast<size_t>(dv));
                ops::gdn_step(M.data(), dv, dk, x.data(), x.data() + dk, x.data() + 2 * dk, 0.9f, 0.5f, out.data());
                out.insert(out.end(), M.begin(), M.end());
                return out;
            });
        }
}

TEST_CASE("simd forms: attention", "[simd][determinism]") {
    const int64_t hd = 64, hdv = 80;  // hdv: four vectors at a time, then one
    for (const GgmlType type : {GgmlType::F32, GgmlType::F16})
        for (const int64_t n_heads : {int64_t{8}, int64_t{3}})
            for (const int64_t n_tok : {int64_t{1}, int64_t{3}}) {
                const int64_t n_pos0 = 45, n_pos = n_pos0 + n_tok - 1, q_stride = hd, q_tok = n_heads * hd;
                const auto q = test::gaussian(static_cast<size_t>(n_tok * q_tok), 7);
                const auto kf = test::gaussian(static_cast<size_t>(n_pos * hd), 8);
                const auto vf = test::gaussian(static_cast<size_t>(n_pos * hdv), 9);
                const size_t rk = row_bytes(type, hd), rv = row_bytes(type, hdv);
                std::vector<uint8_t> kb(rk * static_cast<size_t>(n_pos)), vb(rv * static_cast<size_t>(n_pos));
                for (int64_t u = 0; u < n_pos; ++u) {
                    quantize_row(type, kf.data() + u * hd, kb.data() + rk * static_cast<size_t>(u), hd);
                    quantize_row(type, vf.data() + u * hdv, vb.data() + rv * static_cast<size_t>(u), hdv);
                }
                const ops::KvRows k{type, kb.data(), rk}, v{type, vb.data(), rv};
                CAPTURE(type_info(type).name, n_heads, n_tok);
                same_in_every_form([&] {
                    std::vector<float> out(static_cast<size_t>(n_tok * n_heads * hdv));
                    ops::attend_tokens(q.data(), q_tok, q_stride, n_tok, n_heads, hd, hdv, 0.125f, k, v, n_pos0, out.data(),
                                       n_heads * hdv, hdv);
                    return out;
                });
            }
}

TEST_CASE("simd forms: the f32 matmul", "[simd][determinism]") {
    const int64_t n_in = 200, n_out = 9, T = 5;  // tiles of 4 rows and 4 tokens with remainders, a tail of 8 values
    const auto wf = test::gaussian(static_cast<size_t>(n_in * n_out), 10), x = test::gaussian(static_cast<size_t>(n_in * T), 11);
    const MatView w{GgmlType::F32, wf.data(), n_in, n_out, sizeof(float) * n_in, nullptr};
    ThreadPool pool(1);
    same_in_every_form([&] {
        std::vector<float> y(static_cast<size_t>(n_out * T));
        matmul(pool, w, x.data(), n_in, T, y.data(), n_out);
        return y;
    });
}
