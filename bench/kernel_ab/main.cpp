// Two builds of the integer kernels in one process (scripts/kernel-ab.sh compiles a base
// revision's kernels/cpu/matmul_q_simd*.inc into namespace strata::kq::AB_OLD and the
// working tree's into AB_NEW): each window size's products run alternately on the two,
// one thread, over one weight that stays in L2, so a change to a kernel is measured
// against the clock and cache state of the same seconds. On the shared VMs this project
// runs on, separate binaries timed minutes apart moved by 10-30% on their own; here the
// ratio holds to a few percent. The products' outputs are compared too.
//
// Usage (through scripts/kernel-ab.sh): kernel_ab TYPE [ROWS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/huge_buffer.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_q.h"

namespace strata::kq {
namespace AB_OLD {
void run_rows(const Job&, int64_t, int64_t);
}
namespace AB_NEW {
void run_rows(const Job&, int64_t, int64_t);
}
}  // namespace strata::kq

using namespace strata;

int main(int argc, char** argv) {
    if (argc < 2 || !type_from_name(argv[1])) {
        std::fprintf(stderr, "usage: kernel_ab TYPE [ROWS]\n");
        return 2;
    }
    const GgmlType type = *type_from_name(argv[1]);
    const int64_t n_in = 2048, n_out = argc > 2 ? std::atoll(argv[2]) : 256;
    force_int_path(AB_ISA);  // the packed layout of the kernels under test
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t rb = row_bytes(type, n_in);
    std::vector<uint8_t> rows(rb * static_cast<size_t>(n_out));
    std::vector<float> f(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        for (float& v : f) v = nd(rng);
        quantize_row(type, f.data(), rows.data() + static_cast<size_t>(r) * rb, n_in);
    }
    MatView w{type, rows.data(), n_in, n_out, rb, nullptr};
    HugeBuffer packed(packed_size(w));
    if (packed_size(w) > 0) {
        pack_weights(w, packed.data());
        w.packed = packed.data();
    }
    const double bytes = static_cast<double>(packed_size(w) > 0 ? packed_size(w) : rb * static_cast<size_t>(n_out));
    std::printf("%s, %lld x %lld, %s kernels, one thread; token-GB/s = weight bytes x rows / time\n",
                argv[1], static_cast<long long>(n_out), static_cast<long long>(n_in), AB_ISA);
    for (int T : {1, 2, 3, 4, 8, 9}) {
        std::vector<float> x(static_cast<size_t>(n_in * T)), y0(static_cast<size_t>(n_out * T)), y1(y0.size());
        for (float& v : x) v = nd(rng);
        ActQ a;
        a.reserve(n_in, T);
        for (int t = 0; t < T; ++t) quantize_act_token(x.data() + t * n_in, t, a);
        const kq::Job j0{&w, &a, y0.data(), n_out}, j1{&w, &a, y1.data(), n_out};
        // Pairs of short batches, base then new: the median of the pairs' ratios (robust to
        // the clock moving between pairs) and each side's best.
        double best[2] = {1e30, 1e30};
        std::vector<double> ratio;
        for (int r = 0; r < 61; ++r) {
            double s[2];
            for (int v = 0; v < 2; ++v) {
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < 50; ++i) (v ? kq::AB_NEW::run_rows : kq::AB_OLD::run_rows)(v ? j1 : j0, 0, n_out);
                s[v] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 50;
                best[v] = std::min(best[v], s[v]);
            }
            ratio.push_back(s[0] / s[1]);
        }
        std::nth_element(ratio.begin(), ratio.begin() + 30, ratio.end());
        const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0;
        std::printf("rows %d: base %6.1f  new %6.1f token-GB/s (best)  new/base %.3f (median of pairs)  %s\n", T,
                    bytes * T / best[0] / 1e9, bytes * T / best[1] / 1e9, ratio[30], same ? "same output" : "OUTPUT DIFFERS");
    }
}
