// A MoE layer's experts over a verify window (1 + K rows), as CpuOps::moe_experts runs
// them, against one token's decode step over the same weights: how much a window's
// experts cost in decode steps, and how close that is to what the bytes and the
// arithmetic allow. Each of --layers layers has its own experts (a model's weights:
// layers * experts * 3 matrices, well past the caches by default) and its own random
// routing; the figures are the means per layer over the best of --rounds rounds.
//
// Usage: moe_window [--type TYPE] [--embd N] [--ff N] [--experts E] [--used U] [--shared 0|1]
//                   [--tokens T,T,...] [--layers L] [--rounds R] [-t THREADS]
// (defaults: q8_0, the small qwen3next preset of make-model: embd 512, ff 256, 16 experts,
// 4 used, a shared expert; windows of 2, 4 and 9 tokens (K = 1, 3, 8), 160 layers, 5
// rounds, 2 threads). One row per window size: the window's experts as CpuOps runs them
// (moe_ffn, one task per expert), the same products in the decode step's two grouped
// runs, and a plain read of the experts the window routes to (what the memory gives that
// access pattern), each in us per layer and against the decode step.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/huge_buffer.h"
#include "engine/core/thread_pool.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/moe_ffn.h"

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

struct Opts {
    GgmlType type = GgmlType::Q8_0;
    int64_t embd = 512, ff = 256;
    int experts = 16, used = 4, layers = 160, rounds = 5, threads = 2;
    std::vector<int64_t> tokens = {2, 4, 9};
    bool shared = true;
};

// One quantized, packed matrix [n_out, n_in]; `copies` of it back to back (the rows stay
// for MatView::data; a packed view reads only its packed copy).
struct Mats {
    std::vector<uint8_t> rows;
    HugeBuffer buf;
    std::vector<MatView> w;
    size_t bytes = 0;
};

Mats make(GgmlType type, int64_t n_out, int64_t n_in, int copies, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const size_t rb = row_bytes(type, n_in);
    Mats m;
    m.rows.resize(rb * static_cast<size_t>(n_out));
    std::vector<float> f(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < n_out; ++r) {
        for (float& v : f) v = nd(rng) * 0.05f;
        quantize_row(type, f.data(), m.rows.data() + static_cast<size_t>(r) * rb, n_in);
    }
    const MatView one{type, m.rows.data(), n_in, n_out, rb, nullptr};
    const size_t packed = packed_size(one);
    m.bytes = packed > 0 ? packed : m.rows.size();
    m.buf = HugeBuffer(m.bytes * static_cast<size_t>(copies));
    if (packed > 0) pack_weights(one, m.buf.data());
    else std::memcpy(m.buf.data(), m.rows.data(), m.rows.size());
    for (int c = 1; c < copies; ++c) std::memcpy(m.buf.data() + m.bytes * static_cast<size_t>(c), m.buf.data(), m.bytes);
    for (int c = 0; c < copies; ++c) {
        MatView v = one;
        uint8_t* at = m.buf.data() + m.bytes * static_cast<size_t>(c);
        if (packed > 0) v.packed = at;
        else v.data = at;
        m.w.push_back(v);
    }
    return m;
}

// A read-only loop (512-bit loads) over n bytes; returns a lane of the XOR so it stays live.
__attribute__((target("avx512f"))) int32_t read_all(const uint8_t* p, size_t n) {
    __m512i acc = _mm512_setzero_si512();
    for (size_t off = 0; off + 256 <= n; off += 256)
        acc = _mm512_ternarylogic_epi32(acc, _mm512_loadu_si512(p + off), _mm512_loadu_si512(p + off + 64), 0x96),
        acc = _mm512_ternarylogic_epi32(acc, _mm512_loadu_si512(p + off + 128), _mm512_loadu_si512(p + off + 192), 0x96);
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, acc);
    return lanes[0];
}

struct Layer {
    std::vector<ExpertFfn> ffn;
    std::vector<int32_t> tok, order;
    size_t bytes = 0;  // the weights the window reads
};

}  // namespace

int main(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "moe_window: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--type") {
            const auto t = type_from_name(next());
            if (!t) return std::fprintf(stderr, "moe_window: unknown type\n"), 2;
            o.type = *t;
        } else if (a == "--embd") o.embd = std::atoll(next());
        else if (a == "--ff") o.ff = std::atoll(next());
        else if (a == "--experts") o.experts = std::atoi(next());
        else if (a == "--used") o.used = std::atoi(next());
        else if (a == "--shared") o.shared = std::atoi(next()) != 0;
        else if (a == "--tokens") {
            o.tokens.clear();
            for (std::string v = next(), part; !v.empty();) {
                const size_t c = v.find(',');
                part = v.substr(0, c);
                v = c == std::string::npos ? "" : v.substr(c + 1);
                o.tokens.push_back(std::atoll(part.c_str()));
            }
        }
        else if (a == "--layers") o.layers = std::atoi(next());
        else if (a == "--rounds") o.rounds = std::atoi(next());
        else if (a == "-t") o.threads = std::atoi(next());
        else {
            std::printf("usage: moe_window [--type TYPE] [--embd N] [--ff N] [--experts E] [--used U] [--shared 0|1] "
                        "[--tokens T,T,...] [--layers L] [--rounds R] [-t THREADS]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }
    const int64_t t_max = o.tokens.empty() ? 0 : *std::max_element(o.tokens.begin(), o.tokens.end());
    const int64_t t_min = o.tokens.empty() ? 0 : *std::min_element(o.tokens.begin(), o.tokens.end());
    if (o.used < 1 || o.used > o.experts || t_min < 1 || o.layers < 1 || o.threads < 1)
        return std::fprintf(stderr, "moe_window: bad sizes\n"), 2;
    const int n_mats = o.layers * (o.experts + (o.shared ? 1 : 0));
    const Mats gate = make(o.type, o.ff, o.embd, n_mats, 1), up = make(o.type, o.ff, o.embd, n_mats, 2),
               down = make(o.type, o.embd, o.ff, n_mats, 3);
    const size_t expert_bytes = gate.bytes + up.bytes + down.bytes;
    std::printf("%s, embd %lld, ff %lld, %d of %d experts%s, %d layers (%.1f MiB of experts), %d threads, "
                "integer path %s\n\n",
                std::string(type_info(o.type).name).c_str(), static_cast<long long>(o.embd), static_cast<long long>(o.ff), o.used,
                o.experts, o.shared ? " + a shared one" : "", o.layers, static_cast<double>(expert_bytes) * n_mats / (1 << 20),
                o.threads, int_path_name());

    ThreadPool pool(o.threads);
    std::atomic<int64_t> sink{0};
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> h(static_cast<size_t>(o.embd * t_max));
    for (float& v : h) v = nd(rng);
    std::vector<float> routed(static_cast<size_t>(o.embd * t_max * o.used)), shared_out(static_cast<size_t>(o.embd * t_max));

    // Each layer's routing of `T` rows (distinct experts per row, as top-k gives), grouped
    // by expert as CpuOps::moe_experts groups them.
    auto route = [&](int64_t T) {
        std::vector<Layer> layers(static_cast<size_t>(o.layers));
        for (int l = 0; l < o.layers; ++l) {
            Layer& L = layers[static_cast<size_t>(l)];
            std::vector<int> ids(static_cast<size_t>(T * o.used));
            for (int64_t t = 0; t < T; ++t) {
                std::vector<int> all(static_cast<size_t>(o.experts));
                for (int e = 0; e < o.experts; ++e) all[static_cast<size_t>(e)] = e;
                std::shuffle(all.begin(), all.end(), rng);
                for (int s = 0; s < o.used; ++s) ids[static_cast<size_t>(t * o.used + s)] = all[static_cast<size_t>(s)];
            }
            L.tok.resize(ids.size());
            L.order.resize(ids.size());
            size_t at = 0;
            std::vector<std::pair<size_t, int64_t>> spans;  // (first, count) per used expert
            std::vector<int> used_e;
            for (int e = 0; e < o.experts; ++e) {
                const size_t first = at;
                for (size_t i = 0; i < ids.size(); ++i)
                    if (ids[i] == e) L.order[at] = static_cast<int32_t>(i), L.tok[at] = static_cast<int32_t>(i / static_cast<size_t>(o.used)), ++at;
                if (at > first) spans.push_back({first, static_cast<int64_t>(at - first)}), used_e.push_back(e);
            }
            const size_t base = static_cast<size_t>(l) * static_cast<size_t>(o.experts + (o.shared ? 1 : 0));
            for (size_t s = 0; s < spans.size(); ++s) {
                const size_t m = base + static_cast<size_t>(used_e[s]);
                L.ffn.push_back({gate.w[m], up.w[m], down.w[m], {h.data(), o.embd, spans[s].second, L.tok.data() + spans[s].first},
                                 routed.data(), o.embd, L.order.data() + spans[s].first});
                L.bytes += expert_bytes;
            }
            if (o.shared) {
                const size_t m = base + static_cast<size_t>(o.experts);
                L.ffn.push_back({gate.w[m], up.w[m], down.w[m], {h.data(), o.embd, T}, shared_out.data(), o.embd, nullptr});
                L.bytes += expert_bytes;
            }
        }
        return layers;
    };

    // The decode step's way (two grouped runs: gates and ups, then downs) and the window's
    // (moe_ffn: one task per expert), each timed over every layer.
    std::vector<float> g, u, y;
    auto grouped = [&](const Layer& L) {
        int64_t rows = 0;
        for (const ExpertFfn& e : L.ffn) rows += e.in.T;
        g.resize(static_cast<size_t>(rows * o.ff));
        u.resize(g.size());
        y.resize(static_cast<size_t>(rows * o.embd));
        std::vector<MatIn> ins, dins;
        std::vector<MatOut> outs, douts;
        std::vector<int> of, dof;
        int64_t r = 0;
        for (const ExpertFfn& e : L.ffn) {
            of.insert(of.end(), {static_cast<int>(ins.size()), static_cast<int>(ins.size())});
            ins.push_back(e.in);
            outs.push_back({e.gate, g.data() + r * o.ff, o.ff});
            outs.push_back({e.up, u.data() + r * o.ff, o.ff});
            dof.push_back(static_cast<int>(dins.size()));
            dins.push_back({u.data() + r * o.ff, o.ff, e.in.T, nullptr, g.data() + r * o.ff});
            douts.push_back({e.down, y.data() + r * o.embd, o.embd});
            r += e.in.T;
        }
        matmul_grouped(pool, ins, outs, of);
        matmul_grouped(pool, dins, douts, dof);
    };
    // A plain read of the same experts' bytes, one task per expert as moe_ffn takes them:
    // what the memory gives this access pattern.
    auto read = [&](const Layer& L) {
        pool.run(static_cast<int64_t>(L.ffn.size()), [&](int64_t i) {
            const ExpertFfn& e = L.ffn[static_cast<size_t>(i)];
            for (const MatView* w : {&e.gate, &e.up, &e.down})
                sink += read_all(static_cast<const uint8_t*>(w->packed ? w->packed : w->data), w == &e.down ? down.bytes : gate.bytes);
        });
    };
    struct Result {
        double us = 0;
    };
    auto time = [&](const std::vector<Layer>& layers, int how) {
        Result best{1e30};
        for (int r = 0; r < o.rounds; ++r) {
            const auto t0 = Clock::now();
            for (const Layer& L : layers) {
                if (how == 0) grouped(L);
                else if (how == 1) moe_ffn(pool, L.ffn);
                else read(L);
            }
            const double s = std::chrono::duration<double>(Clock::now() - t0).count();
            best.us = std::min(best.us, s * 1e6 / o.layers);
        }
        return best;
    };

    const Result dec = time(route(1), 0);
    std::printf("| window rows | experts read per layer | moe_ffn us | grouped runs us | read of those experts us | moe_ffn / decode step | moe_ffn / read |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    std::printf("| 1 (decode step, grouped runs) | %d | | %.1f | | 1.00x | |\n", o.used + (o.shared ? 1 : 0), dec.us);
    for (const int64_t T : o.tokens) {
        const std::vector<Layer> window = route(T);
        double experts_read = 0;
        for (const Layer& L : window) experts_read += static_cast<double>(L.bytes) / static_cast<double>(expert_bytes);
        experts_read /= o.layers;
        const Result win = time(window, 1), win_g = time(window, 0), rd = time(window, 2);
        std::printf("| %lld | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n", static_cast<long long>(T), experts_read, win.us,
                    win_g.us, rd.us, win.us / dec.us, win.us / rd.us);
    }
    std::printf("\n(us per layer, the best of %d rounds over %d layers; %.1f MB per layer of experts read by the decode step)\n",
                o.rounds, o.layers, static_cast<double>(expert_bytes) * (o.used + (o.shared ? 1 : 0)) / 1e6);
    return 0;
}
