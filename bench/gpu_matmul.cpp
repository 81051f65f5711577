// Decode-shaped products (one row of x) of quantized weights on the GPU backend: the
// integer kernel of each type at the shapes a decode step launches, as GB/s of the
// weights' bytes against the card's read bandwidth measured in the same run. Each shape is
// launched `iters` times back to back from a replayed graph, as a decode step's kernels
// run (no host launch between them), so small shapes show the kernel's own floor.
//
// Usage: gpu_matmul [--device N] [--iters N] [--reps N] [TYPE...]
//   (default types: q4_K q8_0 q6_K q5_K iq4_xs q4_0; reps: timed replays per shape, 5;
//   --iters 1 --reps 0 launches each shape twice, untimed: for a profiler such as ncu)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#if defined(STRATA_GPU_BACKEND)
#include "kernels/cuda/gpu.h"
#endif

#if !defined(STRATA_GPU_BACKEND)
int main() {
    std::printf("gpu_matmul: built without a GPU backend (STRATA_CUDA / STRATA_HIP)\n");
    return 0;
}
#else

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSeedRows = 256;  // rows quantized; the rest are copies of them

struct Shape {
    int64_t n_in, n_out;
    const char* what;
};

// Qwen3-Next-80B-A3B's and a 1B llama's decode products.
const Shape kShapes[] = {
    {2048, 512, "expert gate/up (80b-a3b)"},   {512, 2048, "expert down (80b-a3b)"},
    {2048, 2048, "attention out (1b)"},        {2048, 8192, "ffn gate/up (1b)"},
    {8192, 2048, "ffn down (1b)"},             {2048, 12288, "GDN in-proj (80b-a3b)"},
    {2048, 151936, "LM head (qwen vocabulary)"},
};

std::vector<uint8_t> weights(GgmlType type, const Shape& s) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t rb = row_bytes(type, s.n_in);
    std::vector<float> f(static_cast<size_t>(s.n_in));
    std::vector<uint8_t> rows(rb * static_cast<size_t>(s.n_out));
    for (int64_t r = 0; r < std::min(s.n_out, kSeedRows); ++r) {
        for (float& v : f) v = nd(rng);
        quantize_row(type, f.data(), rows.data() + static_cast<size_t>(r) * rb, s.n_in);
    }
    for (int64_t r = kSeedRows; r < s.n_out; ++r)
        std::memcpy(rows.data() + static_cast<size_t>(r) * rb, rows.data() + static_cast<size_t>(r % kSeedRows) * rb,
                    rb);
    return rows;
}

// Seconds per product: the best of `reps` replays of a graph of `iters` products.
double seconds_per_product(const gpu::Weight& w, const gpu::ActQ& xq, gpu::Rows y, const gpu::IqTables& tab,
                           gpu::Stream s, int iters, int reps) {
    gpu::Graphs* g = gpu::graphs_create(s, nullptr);
    double best = 1e30;
    for (int r = 0; r < reps + 2; ++r) {  // the first flush runs directly, the second captures
        gpu::graphs_attach(g);
        for (int i = 0; i < iters; ++i) gpu::matmul_q(w, xq, y, tab, s);
        gpu::graphs_attach(nullptr);
        gpu::stream_sync(s);
        const auto t0 = Clock::now();
        gpu::graphs_flush(g);
        gpu::stream_sync(s);
        if (r >= 2) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
    }
    gpu::graphs_destroy(g);
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> types;
    int dev = 0, iters = 50, reps = 5;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--device" && i + 1 < argc) dev = std::atoi(argv[++i]);
        else if (a == "--iters" && i + 1 < argc) iters = std::max(1, std::atoi(argv[++i]));
        else if (a == "--reps" && i + 1 < argc) reps = std::max(0, std::atoi(argv[++i]));
        else if (a == "-h" || a == "--help") {
            std::printf("usage: gpu_matmul [--device N] [--iters N] [--reps N] [TYPE...]\n");
            return 0;
        } else types.push_back(a);
    }
    if (types.empty()) types = {"q4_K", "q8_0", "q6_K", "q5_K", "iq4_xs", "q4_0"};
    try {
        std::string why;
        if (gpu::device_count(&why) <= dev) {
            std::printf("gpu_matmul: no %s device %d (%s)\n", gpu::backend_name(), dev, why.c_str());
            return 0;
        }
        gpu::set_device(dev);
        gpu::Stream s = gpu::stream_create();
        const gpu::IqTables tab = gpu::upload_iq_tables();
        const double bw = gpu::read_bandwidth_gbs(size_t{1} << 30, 5);
        std::printf("%s:%d %s, read bandwidth %.0f GB/s; one row of x, %d products per graph\n\n",
                    gpu::backend_name(), dev, gpu::device_name(dev).c_str(), bw, iters);
        std::printf("| type | shape (in x out) | what | MiB | us per product | GB/s | %% of read |\n");
        std::printf("|---|---|---|---:|---:|---:|---:|\n");
        for (const std::string& name : types) {
            const auto type = type_from_name(name);
            if (!type) {
                std::fprintf(stderr, "gpu_matmul: unknown type %s\n", name.c_str());
                return 2;
            }
            for (const Shape& sh : kShapes) {
                if (sh.n_in % type_info(*type).block_size != 0) continue;
                const std::vector<uint8_t> host = weights(*type, sh);
                void* dw = gpu::dev_alloc(host.size());
                gpu::copy_async(dw, host.data(), host.size(), s);
                std::vector<float> xh(static_cast<size_t>(sh.n_in));
                std::mt19937 rng(2);
                std::normal_distribution<float> nd(0.0f, 1.0f);
                for (float& v : xh) v = nd(rng);
                auto* dx = static_cast<float*>(gpu::dev_alloc(xh.size() * sizeof(float)));
                auto* dy = static_cast<float*>(gpu::dev_alloc(static_cast<size_t>(sh.n_out) * sizeof(float)));
                void* scratch = gpu::dev_alloc(gpu::act_q_bytes(sh.n_in, 1));
                gpu::copy_async(dx, xh.data(), xh.size() * sizeof(float), s);
                const gpu::ActQ xq = gpu::quantize_act({dx, sh.n_in, 1, sh.n_in}, scratch, s);
                const gpu::Weight w{*type, 0, static_cast<const uint8_t*>(dw), sh.n_in, sh.n_out,
                                    row_bytes(*type, sh.n_in)};
                const double sec = seconds_per_product(w, xq, {dy, sh.n_out, 1, sh.n_out}, tab, s, iters, reps);
                const double gbs = static_cast<double>(host.size()) / sec / 1e9;
                std::printf("| %s | %lld x %lld | %s | %.1f | %.2f | %.0f | %.0f%% |\n", name.c_str(),
                            static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out), sh.what,
                            static_cast<double>(host.size()) / (1 << 20), sec * 1e6, gbs, 100.0 * gbs / bw);
                for (void* p : {dw, static_cast<void*>(dx), static_cast<void*>(dy), scratch}) gpu::dev_free(p);
            }
        }
        gpu::stream_destroy(s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_matmul: %s\n", e.what());
        return 1;
    }
    return 0;
}

#endif
