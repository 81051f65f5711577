// Decode-shaped products (one token, or a verify window's few with --tokens) of quantized
// weights (packed where the type has a packed layout), one thread: how fast the integer
// kernel of each type runs from the cache and from memory, beside a read-only loop over
// the same memory. The cache figure is the kernel's compute ceiling; when it is well
// above the memory figure, a decode below the read bandwidth is a matter of the memory
// access (prefetch, streams in flight), not of the arithmetic.
//
// Usage: matmul_speed [--isa NAME] [--mib N] [-t THREADS] [--tokens T] [--piece P] [--experts E] [TYPE...]
// (default types: q8_0 q4_K q6_K q4_0 iq4_xs iq3_xxs; N: MiB of the memory-resident matrix,
// default 256; THREADS: the products' threads, default 1 (the read loop stays one thread);
// T: the activation's rows, default 1 (a verify window's 1 + K: GB/s still counts the
// weights' bytes once per product, so T rows at the same GB/s cost what one row does); P > 0:
// also the memory figure over the same bytes as matrices of P MiB taken in turn, as a
// decode step's products are: what each product's start and end cost; E > 0: also a MoE
// layer's decode products over E experts of Qwen3-Next's shape, see experts_gbs)
//
// The memory figures need matrices well past the caches: on the 2-vCPU Zen 5 VM of
// docs/benchmarks.md a 64 MiB product came partly from a cache (10-20% faster than one of
// 512 MiB), and a prefetch distance chosen there was the wrong one for a model's weights.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <immintrin.h>

#include "engine/core/huge_buffer.h"
#include "engine/core/thread_pool.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "kernels/cpu/matmul.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

constexpr int64_t kIn = 2048;       // a small model's hidden size
constexpr int64_t kSeedRows = 256;  // rows quantized; the rest are copies of them

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Packed {
    MatView w;
    std::vector<uint8_t> rows;
    HugeBuffer packed;
};

Packed make(GgmlType type, int64_t n_out, int64_t n_in = kIn) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t rb = row_bytes(type, n_in);
    std::vector<float> f(static_cast<size_t>(n_in));
    Packed p;
    p.rows.resize(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < std::min(n_out, kSeedRows); ++r) {
        for (float& v : f) v = nd(rng);
        quantize_row(type, f.data(), p.rows.data() + static_cast<size_t>(r) * rb, n_in);
    }
    for (int64_t r = kSeedRows; r < n_out; ++r)
        std::memcpy(p.rows.data() + static_cast<size_t>(r) * rb, p.rows.data() + static_cast<size_t>(r % kSeedRows) * rb, rb);
    p.w = MatView{type, p.rows.data(), n_in, n_out, rb, nullptr};
    if (packed_size(p.w) == 0) return p;  // no packed layout: the rows as they are
    p.packed = HugeBuffer(packed_size(p.w));
    pack_weights(p.w, p.packed.data());
    p.w.packed = p.packed.data();
    p.rows.clear();
    p.rows.shrink_to_fit();
    return p;
}

// Bytes a product reads: the packed copy where the type has one, else the rows.
size_t bytes_read(const MatView& w) {
    const size_t n = packed_size(w);
    return n > 0 ? n : w.row_stride * static_cast<size_t>(w.n_out);
}

// GB/s of the weights' bytes: the best of `reps` timings of `iters` products over `mats`
// (consecutive products read different matrices when there are several).
double product_gbs(ThreadPool& pool, const std::vector<const MatView*>& mats, size_t bytes_each, int iters, int reps,
                   int64_t tokens) {
    std::vector<float> x(static_cast<size_t>(kIn * tokens)), y(static_cast<size_t>(mats[0]->n_out * tokens));
    std::mt19937 rng(2);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) {
            const MatView& w = *mats[static_cast<size_t>(i) % mats.size()];
            matmul(pool, w, x.data(), kIn, tokens, y.data(), w.n_out);
        }
        best = std::max(best, static_cast<double>(bytes_each) * iters / seconds_since(t0) / 1e9);
    }
    return best;
}

// A MoE layer's decode products as CpuOps::moe_experts runs them: the gates and ups of
// 11 experts (10 routed, drawn at random from n_experts, and a shared one) in one grouped
// run over the token's row, then their downs over silu(gate) * up in another. Qwen3-Next's
// expert shape (gate and up 512 x 2048, down 2048 x 512); each kind's copies lie in one
// buffer, as an expert tensor's do. Returns the GB/s of the gates and ups and of the downs
// (the mean over 200 layers, the best of 5 rounds).
std::pair<double, double> experts_gbs(ThreadPool& pool, GgmlType type, int n_experts) {
    constexpr int64_t kEmbd = 2048, kFf = 512;
    constexpr int kUsed = 11, kLayers = 200;
    struct Kind {
        std::vector<MatView> w;
        HugeBuffer buf;
        size_t bytes = 0;
    };
    auto copies = [&](int64_t n_out, int64_t n_in) {
        const Packed one = make(type, n_out, n_in);
        Kind k;
        k.bytes = bytes_read(one.w);
        k.buf = HugeBuffer(k.bytes * static_cast<size_t>(n_experts));
        const void* src = one.w.packed ? one.w.packed : one.w.data;
        for (int e = 0; e < n_experts; ++e) {
            uint8_t* dst = k.buf.data() + k.bytes * static_cast<size_t>(e);
            std::memcpy(dst, src, k.bytes);
            MatView v = one.w;
            if (one.w.packed) v.packed = dst;
            else v.data = dst;
            k.w.push_back(v);
        }
        return k;
    };
    const Kind gate = copies(kFf, kEmbd), up = copies(kFf, kEmbd), down = copies(kEmbd, kFf);
    std::vector<float> h(kEmbd), g(kUsed * kFf), u(kUsed * kFf), y(kUsed * kEmbd);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : h) v = nd(rng);
    double best_gu = 0, best_d = 0;
    for (int round = 0; round < 5; ++round) {
        double s_gu = 0, s_d = 0;
        for (int l = 0; l < kLayers; ++l) {
            int ids[kUsed];
            for (int i = 0; i < kUsed; ++i) ids[i] = static_cast<int>(rng() % static_cast<unsigned>(n_experts));
            // Both runs' lists are built before the clock starts: only the products are timed.
            const MatIn x{h.data(), kEmbd, 1};
            std::vector<MatOut> gu_outs, d_outs;
            std::vector<int> gu_of(2 * kUsed, 0), d_of;
            std::vector<MatIn> d_ins;
            for (int i = 0; i < kUsed; ++i) {
                gu_outs.push_back({gate.w[static_cast<size_t>(ids[i])], g.data() + i * kFf, kFf});
                gu_outs.push_back({up.w[static_cast<size_t>(ids[i])], u.data() + i * kFf, kFf});
                d_of.push_back(i);
                d_ins.push_back({u.data() + i * kFf, kFf, 1, nullptr, g.data() + i * kFf});
                d_outs.push_back({down.w[static_cast<size_t>(ids[i])], y.data() + i * kEmbd, kEmbd});
            }
            const auto t0 = Clock::now();
            matmul_grouped(pool, std::span<const MatIn>(&x, 1), gu_outs, gu_of);
            const auto t1 = Clock::now();
            matmul_grouped(pool, d_ins, d_outs, d_of);
            s_gu += std::chrono::duration<double>(t1 - t0).count();
            s_d += seconds_since(t1);
        }
        best_gu = std::max(best_gu, 2.0 * kUsed * static_cast<double>(gate.bytes) * kLayers / s_gu / 1e9);
        best_d = std::max(best_d, kUsed * static_cast<double>(down.bytes) * kLayers / s_d / 1e9);
    }
    return {best_gu, best_d};
}

// A read-only loop (512-bit loads, the sum kept live) over the same bytes.
__attribute__((target("avx512f"))) double read_gbs(const uint8_t* p, size_t bytes, int reps) {
    double best = 0;
    __m512i acc = _mm512_setzero_si512();
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        for (size_t o = 0; o + 256 <= bytes; o += 256) {
            acc = _mm512_xor_si512(acc, _mm512_loadu_si512(p + o));
            acc = _mm512_xor_si512(acc, _mm512_loadu_si512(p + o + 64));
            acc = _mm512_xor_si512(acc, _mm512_loadu_si512(p + o + 128));
            acc = _mm512_xor_si512(acc, _mm512_loadu_si512(p + o + 192));
        }
        best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
    }
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, acc);
    volatile int32_t sink = lanes[0];
    (void)sink;
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> types;
    double mib = 256, piece_mib = 0;
    int threads = 1, n_experts = 0;
    int64_t tokens = 1;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--isa" && i + 1 < argc) force_int_path(argv[++i]);
            else if (a == "--mib" && i + 1 < argc) mib = std::atof(argv[++i]);
            else if (a == "--piece" && i + 1 < argc) piece_mib = std::atof(argv[++i]);
            else if (a == "--experts" && i + 1 < argc) n_experts = std::max(0, std::atoi(argv[++i]));
            else if (a == "--tokens" && i + 1 < argc) tokens = std::max(1, std::atoi(argv[++i]));
            else if ((a == "-t" || a == "--threads") && i + 1 < argc) threads = std::max(1, std::atoi(argv[++i]));
            else if (a == "-h" || a == "--help") {
                std::printf("usage: matmul_speed [--isa NAME] [--mib N] [-t THREADS] [--tokens N] [--piece P] [--experts E] [TYPE...]\n");
                return 0;
            } else types.push_back(a);
        }
        if (types.empty()) types = {"q8_0", "q4_K", "q6_K", "q4_0", "iq4_xs", "iq3_xxs"};
        const bool avx512 = __builtin_cpu_supports("avx512f");
        ThreadPool pool(threads);
        std::printf("%d thread(s) for the products, %lld token(s), n_in %lld, integer path %s\n\n", threads,
                    static_cast<long long>(tokens), static_cast<long long>(kIn), int_path_name());
        std::printf("| type | decode path | cache GB/s (%lld rows) | memory GB/s (%.0f MiB) | read GB/s (same memory) | memory / read | memory / cache |\n",
                    static_cast<long long>(kSeedRows), mib);
        std::printf("|---|---|---:|---:|---:|---:|---:|\n");
        for (const std::string& name : types) {
            const auto type = type_from_name(name);
            if (!type) {
                std::fprintf(stderr, "matmul_speed: unknown type %s\n", name.c_str());
                return 2;
            }
            // Cache: one small matrix (a few hundred KB), read over and over.
            const Packed small = make(*type, kSeedRows);
            const size_t small_bytes = bytes_read(small.w);
            const double cache = product_gbs(pool, {&small.w}, small_bytes, 2000, 5, tokens);
            // Memory: one matrix of `mib` MiB, far beyond the last-level cache.
            const int64_t rows = std::max<int64_t>(kSeedRows, static_cast<int64_t>(mib * 1048576.0 / static_cast<double>(small_bytes) * kSeedRows) / 16 * 16);
            const Packed big = make(*type, rows);
            const size_t big_bytes = bytes_read(big.w);
            const double mem = product_gbs(pool, {&big.w}, big_bytes, 3, 5, tokens);
            const auto* bytes = static_cast<const uint8_t*>(big.w.packed ? big.w.packed : big.w.data);
            const double rd = avx512 ? read_gbs(bytes, big_bytes, 5) : 0.0;
            std::printf("| %s | %s | %.2f | %.2f | %.1f | %.0f%% | %.0f%% |\n", name.c_str(), int_decode_path_name(*type), cache, mem, rd,
                        rd > 0 ? 100.0 * mem / rd : 0.0, 100.0 * mem / cache);
            if (piece_mib > 0) {
                const int64_t prow = std::max<int64_t>(
                    16, static_cast<int64_t>(piece_mib * 1048576.0 / static_cast<double>(small_bytes) * kSeedRows) / 16 * 16);
                std::vector<Packed> pieces;
                std::vector<const MatView*> views;
                for (int64_t r = 0; r < rows; r += prow) pieces.push_back(make(*type, prow));
                for (const Packed& p : pieces) views.push_back(&p.w);
                const double gbs = product_gbs(pool, views, bytes_read(pieces[0].w), static_cast<int>(pieces.size()) * 3, 5, tokens);
                std::printf("|  | %zu matrices of %lld rows in turn | | %.1f | | | |\n", pieces.size(),
                            static_cast<long long>(prow), gbs);
            }
            if (n_experts > 0) {
                const auto [gu, d] = experts_gbs(pool, *type, n_experts);
                std::printf("|  | 11 of %d experts: gates and ups 512 x 2048 | | %.1f | | | |\n", n_experts, gu);
                std::printf("|  | 11 of %d experts: downs 2048 x 512 | | %.1f | | | |\n", n_experts, d);
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "matmul_speed: %s\n", e.what());
        return 1;
    }
    return 0;
}
