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
// Bandwidth, measured on the same number of threads over arrays at least twice the
// last-level cache, in the same kind of memory as the packed weights (anonymous, 2 MiB
// aligned, transparent huge pages requested), best of 5 passes each:
// - read: the figure decode is compared to, since decode only reads weights. It is the
//   best of several read-only loops, so that the reference is what this machine's cores
//   can actually pull from memory, not what one particular loop gets: 16-byte SSE2 loads
//   with a prefetch 16 KiB ahead, and where the CPU has AVX-512, 64-byte loads in one
//   stream per thread (plain, or with a prefetch 2 KiB ahead) and in four streams per
//   thread (each thread's slice cut in four, read side by side, prefetch 2 KiB ahead).
//   The JSON lists every loop's figure. The host's bandwidth drifts by several percent
//   within minutes (other tenants), so besides the figure measured before the model loads,
//   each repetition's decode is compared with the read loops run right before and after it
//   (two passes each, on an array kept for the whole run): "decode % of read bandwidth" is
//   the median of those per-repetition ratios.
// - copy (c = a) and triad (a = b + s*c), STREAM-like, for reference only: STREAM's byte
//   counts (8 and 12 B per f32 element) leave out the write-allocate traffic, so they
//   are not comparable with a read-only load.
//
// Usage: decode MODEL.gguf [--pp N] [--tg N] [-r R] [-t THREADS] [--batch N] [--json FILE]
//                          [--llama-bench PATH] [--no-stream] [--isa NAME]   (decode --help)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <immintrin.h>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu_ops.h"
#include "engine/core/flags.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model.h"
#include "kernels/cpu/matmul.h"

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

struct ReadLoop {
    const char* name;
    double gb_s = 0;
};

struct Bandwidth {
    double copy = 0, triad = 0, read = 0, array_mib = 0;
    std::vector<ReadLoop> reads;  // read = the best of these
};

// Anonymous memory as WeightStore (engine/model/weights.h) maps the packed weights: 2 MiB
// aligned, transparent huge pages requested.
struct HugeArray {
    float* p = nullptr;
    size_t bytes = 0;
    explicit HugeArray(size_t n) : bytes(n * sizeof(float) + (size_t{2} << 20)) {
        void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::runtime_error("bandwidth: mmap failed");
        madvise(m, bytes, MADV_HUGEPAGE);
        base = m;
        const auto a = reinterpret_cast<uintptr_t>(m);
        p = reinterpret_cast<float*>(a + ((size_t{2} << 20) - a % (size_t{2} << 20)) % (size_t{2} << 20));
    }
    ~HugeArray() { munmap(base, bytes); }
    HugeArray(const HugeArray&) = delete;
    HugeArray& operator=(const HugeArray&) = delete;
    float& operator[](int64_t i) { return p[i]; }
    float* get() { return p; }
    void* base = nullptr;
};

// Read-only loops: integer sums of the bytes in [p, p + n) (n a multiple of 256), so that
// loads, not adds or latency, bound them.
uint32_t read_sse2_pf16k(const char* p, size_t n) {
    __m128i s0 = _mm_setzero_si128(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < n; i += 64) {
        const char* q = p + i;
        _mm_prefetch(q + 16384, _MM_HINT_T0);
        s0 = _mm_add_epi32(s0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
        s1 = _mm_add_epi32(s1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
        s2 = _mm_add_epi32(s2, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32)));
        s3 = _mm_add_epi32(s3, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 48)));
    }
    uint32_t s[4];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(s), _mm_add_epi32(_mm_add_epi32(s0, s1), _mm_add_epi32(s2, s3)));
    return s[0] + s[1] + s[2] + s[3];
}

// AVX-512, NS streams side by side (the range cut in NS parts), a prefetch PF bytes ahead
// in each (0: none).
template <int NS, int PF>
__attribute__((target("avx512f"))) uint32_t read_avx512(const char* p, size_t n) {
    const size_t part = n / NS / 64 * 64;
    __m512i s[NS];
    for (int k = 0; k < NS; ++k) s[k] = _mm512_setzero_si512();
    for (size_t i = 0; i < part; i += 64)
        for (int k = 0; k < NS; ++k) {
            const char* q = p + k * part + i;
            if (PF) _mm_prefetch(q + PF, _MM_HINT_T0);
            s[k] = _mm512_add_epi32(s[k], _mm512_loadu_si512(q));
        }
    for (int k = 1; k < NS; ++k) s[0] = _mm512_add_epi32(s[0], s[k]);
    alignas(64) uint32_t v[16];
    _mm512_store_si512(v, s[0]);
    return std::accumulate(v, v + 16, uint32_t{0});
}

size_t bandwidth_array_bytes() {
    return std::max<size_t>(size_t{256} << 20, 2 * last_level_cache_bytes()) / 4096 * 4096;
}

// Each thread owns a fixed contiguous slice of an array (first touch by that thread),
// on 4 KiB boundaries so every read loop sees whole 256-byte rows.
template <typename F>
void for_slices(ThreadPool& pool, int64_t n, F&& f) {
    const int64_t parts = pool.size();
    pool.run(parts, [&](int64_t p) { f(p, n * p / parts / 1024 * 1024, n * (p + 1) / parts / 1024 * 1024); });
}

// The read-only reference: one array, kept for the whole run, read by every loop.
class ReadProbe {
public:
    explicit ReadProbe(ThreadPool& pool) : pool_(pool), n_(static_cast<int64_t>(bandwidth_array_bytes() / sizeof(float))),
                                           b_(static_cast<size_t>(n_)), sums_(static_cast<size_t>(pool.size())) {
        for_slices(pool_, n_, [&](int64_t, int64_t i0, int64_t i1) { std::fill(b_.get() + i0, b_.get() + i1, 2.0f); });
        __builtin_cpu_init();
        loops_ = {{"sse2, prefetch 16 KiB", read_sse2_pf16k}};
        if (__builtin_cpu_supports("avx512f")) {
            loops_.push_back({"avx512, 1 stream", read_avx512<1, 0>});
            loops_.push_back({"avx512, 1 stream, prefetch 2 KiB", read_avx512<1, 2048>});
            loops_.push_back({"avx512, 4 streams, prefetch 2 KiB", read_avx512<4, 2048>});
        }
    }
    ~ReadProbe() {
        if (std::accumulate(sums_.begin(), sums_.end(), uint64_t{0}) == 1) std::puts("");  // keep the loops
    }
    double array_mib() const { return static_cast<double>(n_) * sizeof(float) / (1 << 20); }

    // The best GB/s of each loop over `passes` passes; returns the best of all.
    double measure(int passes, std::vector<ReadLoop>* per_loop = nullptr) {
        std::vector<ReadLoop> r;
        for (const Loop& l : loops_) r.push_back({l.name, 0});
        const double nb = static_cast<double>(n_) * sizeof(float);
        for (int pass = 0; pass < passes; ++pass)
            for (size_t k = 0; k < loops_.size(); ++k) {
                const auto t0 = clock_type::now();
                for_slices(pool_, n_, [&](int64_t p, int64_t i0, int64_t i1) {
                    sums_[static_cast<size_t>(p)] += loops_[k].fn(reinterpret_cast<const char*>(b_.get() + i0),
                                                                  static_cast<size_t>(i1 - i0) * sizeof(float));
                });
                r[k].gb_s = std::max(r[k].gb_s, nb / since(t0) / 1e9);
            }
        double best = 0;
        for (const ReadLoop& x : r) best = std::max(best, x.gb_s);
        if (per_loop) *per_loop = std::move(r);
        return best;
    }

private:
    struct Loop {
        const char* name;
        uint32_t (*fn)(const char*, size_t);
    };
    ThreadPool& pool_;
    int64_t n_;
    HugeArray b_;
    std::vector<uint32_t> sums_;
    std::vector<Loop> loops_;
};

// STREAM's copy and triad (for reference) and the read loops, best of 5 passes each.
Bandwidth measure_bandwidth(ThreadPool& pool, ReadProbe& probe) {
    const int64_t n = static_cast<int64_t>(bandwidth_array_bytes() / sizeof(float));
    HugeArray a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), c(static_cast<size_t>(n));
    for_slices(pool, n, [&](int64_t, int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
    });
    Bandwidth bw;
    bw.array_mib = probe.array_mib();
    const double nb = static_cast<double>(n) * sizeof(float);
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = clock_type::now();
        for_slices(pool, n, [&](int64_t, int64_t i0, int64_t i1) { std::copy(a.get() + i0, a.get() + i1, c.get() + i0); });
        bw.copy = std::max(bw.copy, 2 * nb / since(t0) / 1e9);
        t0 = clock_type::now();
        for_slices(pool, n, [&](int64_t, int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + 3.0f * c[i];
        });
        bw.triad = std::max(bw.triad, 3 * nb / since(t0) / 1e9);
    }
    bw.read = probe.measure(5, &bw.reads);
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

strata::Flags decode_flags() {
    return strata::Flags(
        "decode",
        "decode MODEL.gguf [--pp N] [--tg N] [-r R] [-t THREADS] [--batch N] [--json FILE] [--llama-bench PATH]\n"
        "              [--no-stream] [--isa NAME]",
        {
            {"--pp", "N", "128", "prompt tokens (one window of --batch at most)"},
            {"--tg", "N", "64", "decode steps of one token"},
            {"--reps", "R", "3", "repetitions after one warm-up", "-r"},
            {"--threads", "N", "2", "threads", "-t"},
            {"--batch", "N", "512", "tokens per prompt window"},
            {"--json", "FILE", "", "also write the results as JSON"},
            {"--llama-bench", "PATH", "", "run this llama-bench on the same file for a ratio (one on PATH is used too)"},
            {"--no-stream", "", "", "skip the bandwidth loops (no % of bandwidth)"},
            {"--isa", "NAME", "", "instruction set of the integer matmul and the float kernels: scalar (SSE2), avx2, avx-vnni, avx512-vnni or amx (default: the best this CPU runs)"},
        });
}

}  // namespace

int main(int argc, char** argv) {
    using namespace strata;
    Flags flags = decode_flags();
    std::string path, json_path, llama_exe;
    int pp = 0, tg = 0, reps = 0, threads = 0, batch = 0;
    bool stream = true;
    try {
        flags.parse(argc, argv);
        if (flags.help()) {
            std::printf("%s", flags.help_text().c_str());
            return 0;
        }
        if (flags.positional().size() != 1) throw UsageError("give one MODEL.gguf");
        path = flags.positional()[0];
        pp = static_cast<int>(flags.integer_in("--pp", 1, 1 << 20));
        tg = static_cast<int>(flags.integer_in("--tg", 1, 1 << 20));
        reps = static_cast<int>(flags.integer_in("--reps", 1, 1000));
        threads = static_cast<int>(flags.integer_in("--threads", 1, 1024));
        batch = static_cast<int>(flags.integer_in("--batch", 1, 1 << 20));
        json_path = flags.str("--json");
        llama_exe = flags.str("--llama-bench");
        stream = !flags.on("--no-stream");
        force_int_path(flags.str("--isa"));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "decode: %s\n\n%s", e.what(), flags.help_text().c_str());
        return 2;
    }
    if (llama_exe.empty() && on_path("llama-bench")) llama_exe = "llama-bench";

    try {
        ThreadPool pool(threads);
        std::unique_ptr<ReadProbe> probe;
        Bandwidth bw;
        if (stream) {
            probe = std::make_unique<ReadProbe>(pool);
            bw = measure_bandwidth(pool, *probe);
        }

        auto model = Model::load(path);
        const auto& hp = model->hp();
        const double bpt = bytes_per_token(*model);
        CpuOps cpu_ops(pool);
        ForwardCtx ctx(cpu_ops, *model);
        std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
        std::vector<int32_t> prompt(static_cast<size_t>(pp));
        for (int i = 0; i < pp; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % hp.n_vocab);

        auto argmax = [&] {
            return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        };
        std::vector<double> pp_ts, tg_ts, rep_read, rep_fraction;
        // Repetition 0 is a warm-up (page cache, scratch buffers) and is not reported.
        for (int rep = 0; rep <= reps; ++rep) {
            SeqState st = model->new_state(ctx.ops, pp + tg + 1, GgmlType::F16);
            auto t0 = clock_type::now();
            for (int i = 0; i < pp; i += batch) {
                const int n = std::min(batch, pp - i);
                model->eval(ctx, st, std::span<const int32_t>(prompt.data() + i, static_cast<size_t>(n)),
                            logits.data(), false);
            }
            const double tp = since(t0);
            // The host's memory bandwidth drifts by several percent within minutes, so each
            // repetition's decode is compared with read loops run right before and after it.
            const double read_before = rep > 0 && probe ? probe->measure(2) : 0;
            t0 = clock_type::now();
            for (int i = 0; i < tg; ++i) {
                const int32_t tok[1] = {argmax()};
                model->eval(ctx, st, tok, logits.data(), false);
            }
            const double tt = since(t0);
            if (rep == 0) continue;
            pp_ts.push_back(pp / tp);
            tg_ts.push_back(tg / tt);
            if (probe) {
                rep_read.push_back(0.5 * (read_before + probe->measure(2)));
                rep_fraction.push_back(bpt * tg / tt / 1e9 / rep_read.back());
            }
        }
        const Stats sp = stats(pp_ts), sd = stats(tg_ts);
        const double gbs = bpt * sd.median / 1e9;

        LlamaBench lb;
        if (!llama_exe.empty()) lb = run_llama_bench(llama_exe, path, threads, pp, tg, reps);

        std::printf("model: %s (%.1f MB of weights read per decoded token)\n", path.c_str(), bpt / 1e6);
        // The decode kernel may differ from the window one for the same bits (matmul.h).
        const auto* tq = model->file().find_tensor("blk.0.ffn_down.weight");
        const std::string decode_path = tq ? int_decode_path_name(tq->type) : int_path_name();
        std::printf("threads %d, prompt %d tokens (windows of %d), decode %d tokens, %d repetitions, integer path %s",
                    threads, pp, batch, tg, reps, int_path_name());
        if (decode_path != int_path_name()) std::printf(" (decode: %s)", decode_path.c_str());
        std::printf("\n\n");
        if (stream) {
            std::printf("| bandwidth (%d threads, %.0f MiB arrays) | read %.1f GB/s | copy %.1f GB/s | triad %.1f GB/s |\n"
                        "|---|---:|---:|---:|\n\n",
                        threads, bw.array_mib, bw.read, bw.copy, bw.triad);
            std::printf("read = the best of:");
            for (size_t k = 0; k < bw.reads.size(); ++k)
                std::printf("%s %s %.1f GB/s", k ? ";" : "", bw.reads[k].name, bw.reads[k].gb_s);
            std::printf("\n\n");
        }
        std::printf("| metric | median | min | max |\n|---|---:|---:|---:|\n");
        std::printf("| prompt tok/s (pp%d) | %.1f | %.1f | %.1f |\n", pp, sp.median, sp.min, sp.max);
        std::printf("| decode tok/s (tg%d) | %.2f | %.2f | %.2f |\n", tg, sd.median, sd.min, sd.max);
        std::printf("| decode GB/s | %.1f | %.1f | %.1f |\n", gbs, bpt * sd.min / 1e9, bpt * sd.max / 1e9);
        const Stats sr = stats(rep_read), sf = stats(rep_fraction);
        if (stream) {
            std::printf("| read GB/s around each decode | %.1f | %.1f | %.1f |\n", sr.median, sr.min, sr.max);
            std::printf("| decode %% of read bandwidth | %.1f%% | %.1f%% | %.1f%% |\n", 100 * sf.median, 100 * sf.min,
                        100 * sf.max);
        }
        if (lb.ran)
            std::printf("\nllama-bench (%s): pp %.1f tok/s, tg %.2f tok/s; strata / llama.cpp: pp %.2fx, tg %.2fx\n",
                        llama_exe.c_str(), lb.pp_ts, lb.tg_ts, lb.pp_ts > 0 ? sp.median / lb.pp_ts : 0.0,
                        lb.tg_ts > 0 ? sd.median / lb.tg_ts : 0.0);
        else if (!llama_exe.empty())
            std::printf("\nllama-bench (%s) did not run or gave no result\n", llama_exe.c_str());

        if (!json_path.empty()) {
            nlohmann::json j = {
                {"model", path}, {"threads", threads}, {"int_path", int_path_name()}, {"int_decode_path", decode_path}, {"pp", pp}, {"tg", tg}, {"reps", reps}, {"batch", batch},
                {"bytes_per_token", bpt},
                {"prompt_tok_s", {{"median", sp.median}, {"min", sp.min}, {"max", sp.max}}},
                {"decode_tok_s", {{"median", sd.median}, {"min", sd.min}, {"max", sd.max}}},
                {"decode_gb_s", gbs},
            };
            if (stream) {
                nlohmann::json reads = nlohmann::json::object();
                for (const ReadLoop& r : bw.reads) reads[r.name] = r.gb_s;
                // reference = read: decode reads the weights and writes next to nothing.
                j["bandwidth_gb_s"] = {{"copy", bw.copy}, {"triad", bw.triad}, {"read", bw.read},
                                       {"read_loops", reads}, {"reference", "read_around_decode"},
                                       {"read_around_decode", rep_read}, {"array_mib", bw.array_mib}};
                j["decode_fraction"] = {{"median", sf.median}, {"min", sf.min}, {"max", sf.max},
                                        {"per_rep", rep_fraction}};
            }
            if (lb.ran) j["llama_bench"] = {{"exe", llama_exe}, {"pp_tok_s", lb.pp_ts}, {"tg_tok_s", lb.tg_ts}};
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "decode: %s\n", e.what());
        return 1;
    }
    return 0;
}
