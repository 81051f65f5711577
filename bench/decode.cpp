// Prompt-processing and single-sequence decode speed of one GGUF model, against the
// machine's memory bandwidth measured in the same run.
//
// For each of R repetitions: a fresh sequence state, one prompt of --pp tokens (in
// windows of --batch), then --tg decode steps of one token each. Reports the median and
// the spread (min..max) of prompt tok/s and decode tok/s, and the decode's achieved
// GB/s = (weight bytes read per decoded token) x tok/s. Bytes per token are all layer
// weights plus the output head (token_embd only when it doubles as the head; otherwise
// one row of it is read, which is ignored); for MoE expert stacks only the active
// fraction n_expert_used / n_expert counts.
//
// Bandwidth: STREAM-like copy (c = a) and triad (a = b + s*c) plus a read-only sum (with
// a software prefetch, as the kernels do) over arrays at least twice the last-level
// cache, on the same number of threads, best of 5.
// STREAM's byte counts (copy 8 B per f32 element, triad 12 B) ignore the write-allocate
// traffic. The reference is the best of copy and triad.
//
// Usage: decode MODEL.gguf [--pp N=128] [--tg N=64] [-r R=3] [-t THREADS=2] [--batch N=512]
//                          [--json FILE] [--llama-bench PATH] [--no-stream]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <emmintrin.h>
#include <xmmintrin.h>

#include <nlohmann/json.hpp>

#include "engine/core/thread_pool.h"
#include "engine/model/model.h"

namespace {

using clock_type = std::chrono::steady_clock;
using strata::ThreadPool;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct Stats {
    double median = 0, min = 0, max = 0;
};

Stats stats(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    Stats s;
    if (v.empty()) return s;
    s.min = v.front();
    s.max = v.back();
    const size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

size_t last_level_cache_bytes() {
    size_t best = 0;
    for (int i = 0; i < 8; ++i) {
        std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
        std::string s;
        if (!(f >> s) || s.empty()) continue;
        size_t v = std::strtoull(s.c_str(), nullptr, 10);
        if (s.back() == 'K') v <<= 10;
        if (s.back() == 'M') v <<= 20;
        best = std::max(best, v);
    }
    return best ? best : (size_t{64} << 20);
}

struct Bandwidth {
    double copy = 0, triad = 0, read = 0, array_mib = 0;
};

// Each thread owns a fixed contiguous slice of the arrays (first touch by that thread).
Bandwidth measure_bandwidth(ThreadPool& pool) {
    const size_t llc = last_level_cache_bytes();
    const size_t bytes = std::max<size_t>(size_t{256} << 20, 2 * llc);
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    std::unique_ptr<float[]> a(new float[static_cast<size_t>(n)]), b(new float[static_cast<size_t>(n)]),
        c(new float[static_cast<size_t>(n)]);
    const int64_t parts = pool.size();
    auto slice = [&](int64_t p, auto&& f) { f(n * p / parts, n * (p + 1) / parts); };
    pool.run(parts, [&](int64_t p) {
        slice(p, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
        });
    });
    std::vector<double> sums(static_cast<size_t>(parts));
    Bandwidth bw;
    bw.array_mib = static_cast<double>(bytes) / (1 << 20);
    const double nb = static_cast<double>(n) * sizeof(float);
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = clock_type::now();
        pool.run(parts, [&](int64_t p) {
            slice(p, [&](int64_t i0, int64_t i1) { std::copy(a.get() + i0, a.get() + i1, c.get() + i0); });
        });
        bw.copy = std::max(bw.copy, 2 * nb / since(t0) / 1e9);
        t0 = clock_type::now();
        pool.run(parts, [&](int64_t p) {
            slice(p, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + 3.0f * c[i];
            });
        });
        bw.triad = std::max(bw.triad, 3 * nb / since(t0) / 1e9);
        t0 = clock_type::now();
        pool.run(parts, [&](int64_t p) {
            slice(p, [&](int64_t i0, int64_t i1) {
                // Integer sums (SSE2, baseline x86-64) with a software prefetch 16 KiB
                // ahead, like the matmul kernels: loads, not adds or latency, bound it.
                const char* base = reinterpret_cast<const char*>(b.get());
                __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
                int64_t i = i0;
                for (; i + 16 <= i1; i += 16) {
                    const char* q = base + i * 4;
                    _mm_prefetch(q + 16384, _MM_HINT_T0);
                    s0 = _mm_add_epi32(s0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
                    s1 = _mm_add_epi32(s1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
                    s2 = _mm_add_epi32(s2, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32)));
                    s3 = _mm_add_epi32(s3, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 48)));
                }
                uint32_t s[4];
                _mm_storeu_si128(reinterpret_cast<__m128i*>(s),
                                 _mm_add_epi32(_mm_add_epi32(s0, s1), _mm_add_epi32(s2, s3)));
                sums[static_cast<size_t>(p)] = static_cast<double>(s[0] + s[1] + s[2] + s[3]);
            });
        });
        bw.read = std::max(bw.read, nb / since(t0) / 1e9);
    }
    if (std::accumulate(sums.begin(), sums.end(), 0.0) < 0) std::puts("");  // keep the read loop
    return bw;
}

// Bytes of weights read for one decoded token.
double bytes_per_token(const strata::Model& m) {
    const auto& hp = m.hp();
    const auto& f = m.file();
    const bool tied = f.find_tensor("output.weight") == nullptr;
    double total = 0;
    for (const auto& t : f.tensors()) {
        if (t.name == "token_embd.weight") {
            if (tied) total += static_cast<double>(t.nbytes);
            continue;
        }
        double b = static_cast<double>(t.nbytes);
        if (t.name.find("_exps.") != std::string::npos && hp.n_expert > 0)
            b *= static_cast<double>(hp.n_expert_used) / static_cast<double>(hp.n_expert);
        // The MTP block is not run while decoding.
        if (t.name.find("nextn") != std::string::npos) continue;
        total += b;
    }
    return total;
}

struct LlamaBench {
    bool ran = false;
    double pp_ts = 0, tg_ts = 0;
};

LlamaBench run_llama_bench(const std::string& exe, const std::string& model, int threads, int pp, int tg,
                           int reps) {
    LlamaBench r;
    const std::string cmd = "'" + exe + "' -m '" + model + "' -t " + std::to_string(threads) + " -p " +
                            std::to_string(pp) + " -n " + std::to_string(tg) + " -r " + std::to_string(reps) +
                            " -o json 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::string out;
    char buf[4096];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
    if (pclose(p) != 0) return r;
    try {
        for (const auto& e : nlohmann::json::parse(out)) {
            if (e.value("n_prompt", 0) > 0 && e.value("n_gen", 0) == 0) r.pp_ts = e.value("avg_ts", 0.0);
            if (e.value("n_gen", 0) > 0 && e.value("n_prompt", 0) == 0) r.tg_ts = e.value("avg_ts", 0.0);
        }
        r.ran = r.pp_ts > 0 || r.tg_ts > 0;
    } catch (...) {
    }
    return r;
}

bool on_path(const std::string& exe) {
    return std::system(("command -v " + exe + " >/dev/null 2>&1").c_str()) == 0;
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: decode MODEL.gguf [--pp N] [--tg N] [-r R] [-t THREADS] [--batch N] [--json FILE]\n"
                 "                         [--llama-bench PATH] [--no-stream]\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    using namespace strata;
    std::string path, json_path, llama_exe;
    int pp = 128, tg = 64, reps = 3, threads = 2, batch = 512;
    bool stream = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (a == "--pp") pp = std::atoi(next().c_str());
        else if (a == "--tg") tg = std::atoi(next().c_str());
        else if (a == "-r") reps = std::atoi(next().c_str());
        else if (a == "-t") threads = std::atoi(next().c_str());
        else if (a == "--batch") batch = std::atoi(next().c_str());
        else if (a == "--json") json_path = next();
        else if (a == "--llama-bench") llama_exe = next();
        else if (a == "--no-stream") stream = false;
        else if (a.size() > 1 && a[0] == '-') usage();
        else path = a;
    }
    if (path.empty() || pp < 1 || tg < 1 || reps < 1 || threads < 1 || batch < 1) usage();
    if (llama_exe.empty() && on_path("llama-bench")) llama_exe = "llama-bench";

    try {
        ThreadPool pool(threads);
        Bandwidth bw;
        if (stream) bw = measure_bandwidth(pool);
        const double bw_ref = std::max(bw.copy, bw.triad);

        auto model = Model::load(path);
        const auto& hp = model->hp();
        const double bpt = bytes_per_token(*model);
        ForwardCtx ctx{pool, {}};
        std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
        std::vector<int32_t> prompt(static_cast<size_t>(pp));
        for (int i = 0; i < pp; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % hp.n_vocab);

        auto argmax = [&] {
            return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        };
        std::vector<double> pp_ts, tg_ts;
        // Repetition 0 is a warm-up (page cache, scratch buffers) and is not reported.
        for (int rep = 0; rep <= reps; ++rep) {
            SeqState st = model->new_state(pp + tg + 1, GgmlType::F16);
            auto t0 = clock_type::now();
            for (int i = 0; i < pp; i += batch) {
                const int n = std::min(batch, pp - i);
                model->eval(ctx, st, std::span<const int32_t>(prompt.data() + i, static_cast<size_t>(n)),
                            logits.data(), false);
            }
            const double tp = since(t0);
            t0 = clock_type::now();
            for (int i = 0; i < tg; ++i) {
                const int32_t tok[1] = {argmax()};
                model->eval(ctx, st, tok, logits.data(), false);
            }
            const double tt = since(t0);
            if (rep == 0) continue;
            pp_ts.push_back(pp / tp);
            tg_ts.push_back(tg / tt);
        }
        const Stats sp = stats(pp_ts), sd = stats(tg_ts);
        const double gbs = bpt * sd.median / 1e9;

        LlamaBench lb;
        if (!llama_exe.empty()) lb = run_llama_bench(llama_exe, path, threads, pp, tg, reps);

        std::printf("model: %s (%.1f MB of weights read per decoded token)\n", path.c_str(), bpt / 1e6);
        std::printf("threads %d, prompt %d tokens (windows of %d), decode %d tokens, %d repetitions\n\n", threads,
                    pp, batch, tg, reps);
        if (stream)
            std::printf("| bandwidth (%d threads, %.0f MiB arrays) | copy %.1f GB/s | triad %.1f GB/s | read %.1f GB/s |\n"
                        "|---|---:|---:|---:|\n\n",
                        threads, bw.array_mib, bw.copy, bw.triad, bw.read);
        std::printf("| metric | median | min | max |\n|---|---:|---:|---:|\n");
        std::printf("| prompt tok/s (pp%d) | %.1f | %.1f | %.1f |\n", pp, sp.median, sp.min, sp.max);
        std::printf("| decode tok/s (tg%d) | %.2f | %.2f | %.2f |\n", tg, sd.median, sd.min, sd.max);
        std::printf("| decode GB/s | %.1f | %.1f | %.1f |\n", gbs, bpt * sd.min / 1e9, bpt * sd.max / 1e9);
        if (stream)
            std::printf("| decode %% of bandwidth (best of copy/triad) | %.0f%% | | |\n| decode %% of read bandwidth | %.0f%% | | |\n",
                        100 * gbs / bw_ref, 100 * gbs / bw.read);
        if (lb.ran)
            std::printf("\nllama-bench (%s): pp %.1f tok/s, tg %.2f tok/s; strata / llama.cpp: pp %.2fx, tg %.2fx\n",
                        llama_exe.c_str(), lb.pp_ts, lb.tg_ts, lb.pp_ts > 0 ? sp.median / lb.pp_ts : 0.0,
                        lb.tg_ts > 0 ? sd.median / lb.tg_ts : 0.0);
        else if (!llama_exe.empty())
            std::printf("\nllama-bench (%s) did not run or gave no result\n", llama_exe.c_str());

        if (!json_path.empty()) {
            nlohmann::json j = {
                {"model", path}, {"threads", threads}, {"pp", pp}, {"tg", tg}, {"reps", reps}, {"batch", batch},
                {"bytes_per_token", bpt},
                {"prompt_tok_s", {{"median", sp.median}, {"min", sp.min}, {"max", sp.max}}},
                {"decode_tok_s", {{"median", sd.median}, {"min", sd.min}, {"max", sd.max}}},
                {"decode_gb_s", gbs},
            };
            if (stream)
                j["bandwidth_gb_s"] = {{"copy", bw.copy}, {"triad", bw.triad}, {"read", bw.read},
                                       {"reference", bw_ref}, {"array_mib", bw.array_mib},
                                       {"decode_fraction", gbs / bw_ref}};
            if (lb.ran) j["llama_bench"] = {{"exe", llama_exe}, {"pp_tok_s", lb.pp_ts}, {"tg_tok_s", lb.tg_ts}};
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "decode: %s\n", e.what());
        return 1;
    }
    return 0;
}
