// Single-threaded dequantization speed of every supported type.
//
// For each type: quantize ~64 MiB of Gaussian f32 data once (timed, reported as MB/s of
// f32 input), then dequantize the whole buffer several times and keep the best run.
// Prints a markdown table: bits/weight, round-trip RMSE relative to the data's RMS, and
// GB/s of quantized bytes read and of f32 bytes written.
//
// Usage: dequant_speed [MiB of f32 data, default 64] [repetitions, default 5]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/quant.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    using namespace strata;
    const double mib = argc > 1 ? std::atof(argv[1]) : 64.0;
    const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
    // Multiple of 256 so every block size divides it.
    const int64_t n = std::max<int64_t>(256, static_cast<int64_t>(mib * 1024 * 1024 / 4) / 256 * 256);

    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    std::mt19937 rng(1234);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    double sum_sq = 0;
    for (float& v : x) {
        v = gauss(rng);
        sum_sq += static_cast<double>(v) * v;
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(n));

    std::printf("%lld values (%.1f MiB f32), best of %d dequantize runs, single thread\n\n",
                static_cast<long long>(n), static_cast<double>(n) * 4 / (1 << 20), reps);
    std::printf("| type | bits/weight | rel. RMSE | quantize MB/s (f32 in) | dequant GB/s (quant read) | dequant GB/s (f32 written) |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (GgmlType t : supported_types()) {
        const TypeInfo& ti = type_info(t);
        const size_t bytes = row_bytes(t, n);
        std::vector<uint8_t> q(bytes);

        auto t0 = std::chrono::steady_clock::now();
        quantize_row(t, x.data(), q.data(), n);
        const double tq = seconds_since(t0);

        double best = 1e30;
        for (int r = 0; r < reps; ++r) {
            t0 = std::chrono::steady_clock::now();
            dequantize_row(t, q.data(), y.data(), n);
            best = std::min(best, seconds_since(t0));
        }
        double err = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double e = static_cast<double>(y[i]) - x[i];
            err += e * e;
        }
        const double rel = std::sqrt(err / static_cast<double>(n)) / rms;
        const double bpw = 8.0 * ti.type_size / ti.block_size;
        std::printf("| %s | %.4g | %.5f | %.1f | %.2f | %.2f |\n", std::string(ti.name).c_str(), bpw, rel,
                    static_cast<double>(n) * 4 / tq / 1e6, static_cast<double>(bytes) / best / 1e9,
                    static_cast<double>(n) * 4 / best / 1e9);
        std::fflush(stdout);
    }
    return 0;
}
