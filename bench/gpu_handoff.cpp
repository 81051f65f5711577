// How long a hand-off between stages takes to wake its reader on the GPU backend: the
// issue's "hand-off wake-up under 5 us". Two measurements, each as the difference of a
// long and a short run (so launches, the host's syncs and the first wait's start cancel
// out), the best of --reps:
//   - the flag alone (kernels/cuda/handoff_latency.cu): one host-mapped word passed back
//     and forth by two spinning kernels on two streams of a device (two devices where
//     there are two), or by a kernel and a host thread (a CPU stage beside a GPU one);
//   - a stage boundary as a split runs it: the writer's handoff_publish (payload stores,
//     fence, ready word), the reader's handoff_wait (spin, then the payload copied into
//     the stage's rows), windows of 1 and 4 rows of n_embd values ping-ponged between two
//     streams, every kernel queued before the first window is let go (as STRATA_SPLIT_OVERLAP
//     queues a stage's window up front), so the host is not on the path.
// A runtime that runs streams one after another (a CPU HIP runtime) can only time out on
// the two-stream rows; the host-thread row runs there.
//
// Usage: gpu_handoff [--device N] [--reps N] [--n-embd N] [--timeout-ms N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(STRATA_GPU_BACKEND)
#include "kernels/cuda/gpu.h"
#endif

#if !defined(STRATA_GPU_BACKEND)
int main() {
    std::printf("gpu_handoff: built without a GPU backend (STRATA_CUDA / STRATA_HIP)\n");
    return 0;
}
#else

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

struct Opts {
    int dev = 0, reps = 5;
    int64_t n_embd = 2048, timeout_ms = 2000;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Host-mapped words, each on its own 128-byte line.
struct Words {
    explicit Words(int n) : n_(n), p_(static_cast<uint64_t*>(gpu::host_alloc_mapped(static_cast<size_t>(n) * 128))) {
        std::memset(p_, 0, static_cast<size_t>(n) * 128);
    }
    ~Words() { gpu::host_free(p_); }
    Words(const Words&) = delete;
    Words& operator=(const Words&) = delete;
    uint64_t* word(int i) { return p_ + i * 16; }
    uint32_t* err(int i) { return reinterpret_cast<uint32_t*>(p_ + i * 16 + 8); }
    void clear() { std::memset(p_, 0, static_cast<size_t>(n_) * 128); }

private:
    int n_;
    uint64_t* p_;
};

// --- the flag alone ---

// The other side of flag_pingpong on a host thread (side 1): the host's hand-off spins
// the same way (engine/backend/handoff.cpp), with acquire loads and a release store.
bool host_side(uint64_t* word, int rounds, int64_t timeout_ms) {
    std::atomic_ref<uint64_t> w(*word);
    const auto t0 = Clock::now();
    for (int i = 0; i < rounds; ++i) {
        const uint64_t odd = 2 * static_cast<uint64_t>(i) + 1;
        for (uint64_t v; (v = w.load(std::memory_order_acquire)) != odd;) {
            if (v == gpu::kHandoffAbort || seconds_since(t0) * 1000 > static_cast<double>(timeout_ms)) return false;
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
        }
        w.store(odd + 1, std::memory_order_release);
    }
    return true;
}

// Seconds for `rounds` rounds; negative when a wait timed out. other_dev < 0: the host
// thread is side 1.
double flag_run(const Opts& o, int other_dev, gpu::Stream a, gpu::Stream b, Words& w, int rounds) {
    w.clear();
    const auto t0 = Clock::now();
    bool ok = true;
    if (other_dev >= 0) {
        gpu::set_device(other_dev);
        gpu::flag_pingpong(w.word(0), 1, rounds, o.timeout_ms, w.err(0), b);
        gpu::set_device(o.dev);
        gpu::flag_pingpong(w.word(0), 0, rounds, o.timeout_ms, w.err(0), a);
    } else {
        gpu::flag_pingpong(w.word(0), 0, rounds, o.timeout_ms, w.err(0), a);
        ok = host_side(w.word(0), rounds, o.timeout_ms);
    }
    gpu::stream_sync(a);
    if (other_dev >= 0) {
        gpu::set_device(other_dev);
        gpu::stream_sync(b);
        gpu::set_device(o.dev);
    }
    const double s = seconds_since(t0);
    return ok && *w.err(0) == 0 ? s : -1.0;
}

// Microseconds per wake-up (half a round), or a negative value on a timeout.
double flag_us(const Opts& o, int other_dev, gpu::Stream a, gpu::Stream b) {
    Words w(1);
    constexpr int kShort = 2000, kLong = 6000;
    double best = 1e30;
    for (int r = 0; r < o.reps + 1; ++r) {  // the first run warms up
        const double s1 = flag_run(o, other_dev, a, b, w, kShort);
        const double s2 = flag_run(o, other_dev, a, b, w, kLong);
        if (s1 < 0 || s2 < 0) return -1.0;
        if (r > 0) best = std::min(best, (s2 - s1) / (2.0 * (kLong - kShort)) * 1e6);
    }
    return best;
}

// --- a stage boundary with the hand-off kernels ---

struct Boundary {
    const Opts& o;
    int dev_b;  // the reader's device
    gpu::Stream a, b;
    int64_t rows;
    static constexpr int kMaxWindows = 96;  // every kernel queued at once: 3 per window and stream

    // Seconds for `windows` round trips A -> B -> A; negative when a wait failed. The rows
    // that come back to A must be the ones it sent (checked after the long run).
    double run(int windows, bool check) {
        const int64_t n = o.n_embd * rows;
        const size_t bytes = static_cast<size_t>(n) * sizeof(float);
        Words w(3);  // 0: the gate, 1: A -> B, 2: B -> A
        auto* pay = static_cast<float*>(gpu::host_alloc_mapped(3 * bytes));
        std::memset(pay, 0, 3 * bytes);
        std::vector<uint64_t> ids(kMaxWindows);
        for (int i = 0; i < kMaxWindows; ++i) ids[static_cast<size_t>(i)] = static_cast<uint64_t>(i) + 1;
        std::vector<float> xh(static_cast<size_t>(n));
        for (size_t i = 0; i < xh.size(); ++i) xh[i] = static_cast<float>(i % 977) * 0.25f - 100.0f;
        std::memcpy(pay + 2 * n, xh.data(), bytes);  // the gate's payload: what A holds already
        // Device memory of each side: the window numbers, the publish counter, the failed flag, x.
        struct Side {
            uint64_t* ids;
            unsigned* words;  // [0] counter, [1] failed
            float* x;
        } side[2];
        for (int s = 0; s < 2; ++s) {
            gpu::set_device(s == 0 ? o.dev : dev_b);
            const gpu::Stream st = s == 0 ? a : b;
            side[s].ids = static_cast<uint64_t*>(gpu::dev_alloc(ids.size() * sizeof(uint64_t)));
            side[s].words = static_cast<unsigned*>(gpu::dev_alloc(2 * sizeof(unsigned)));
            side[s].x = static_cast<float*>(gpu::dev_alloc(bytes));
            gpu::copy_async(side[s].ids, ids.data(), ids.size() * sizeof(uint64_t), st);
            gpu::memset_async(side[s].words, 0, 2 * sizeof(unsigned), st);
            gpu::copy_async(side[s].x, xh.data(), bytes, st);
            gpu::stream_sync(st);
        }
        const gpu::Rows xa{side[0].x, o.n_embd, rows, o.n_embd}, xb{side[1].x, o.n_embd, rows, o.n_embd};
        // As a split does: a side whose wait failed publishes the abort value (the
        // publish's `failed`), and a watchdog, once a wait fails, keeps every word at
        // the abort value, so the waits queued after it end at once instead of each
        // running out its own time (a runtime that runs a kernel
        // as it is queued would otherwise take each wait's whole limit, one after another).
        std::atomic<bool> done{false};
        std::thread watchdog([&] {
            while (!done.load(std::memory_order_acquire)) {
                if (*w.err(0) != 0 || *w.err(1) != 0 || *w.err(2) != 0)
                    for (int i = 0; i < 3; ++i)
                        std::atomic_ref<uint64_t>(*w.word(i)).store(gpu::kHandoffAbort, std::memory_order_release);
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
        // A waits for the gate (window 1) first: nothing moves until every kernel is queued.
        gpu::set_device(o.dev);
        gpu::handoff_wait(w.word(0), w.err(0), side[0].ids, o.timeout_ms, pay + 2 * n, xa, side[0].words + 1, a);
        for (int i = 0; i < windows; ++i) {
            gpu::set_device(o.dev);
            gpu::handoff_publish(xa, pay, w.word(1), side[0].ids + i, false, side[0].words, side[0].words + 1, a);
            gpu::handoff_wait(w.word(2), w.err(2), side[0].ids + i, o.timeout_ms, pay + n, xa, side[0].words + 1, a);
            gpu::set_device(dev_b);
            gpu::handoff_wait(w.word(1), w.err(1), side[1].ids + i, o.timeout_ms, pay, xb, side[1].words + 1, b);
            gpu::handoff_publish(xb, pay + n, w.word(2), side[1].ids + i, false, side[1].words, side[1].words + 1, b);
        }
        const auto t0 = Clock::now();
        uint64_t closed = 0;  // not raised when the watchdog has aborted the run already
        std::atomic_ref<uint64_t>(*w.word(0)).compare_exchange_strong(closed, 1, std::memory_order_release);
        gpu::set_device(o.dev);
        gpu::stream_sync(a);
        gpu::set_device(dev_b);
        gpu::stream_sync(b);
        double s = seconds_since(t0);
        done.store(true, std::memory_order_release);
        watchdog.join();
        for (int i = 0; i < 3; ++i)
            if (*w.err(i) != 0) s = -1.0;
        if (s > 0 && check) {
            std::vector<float> back(xh.size());
            gpu::set_device(o.dev);
            gpu::copy_async(back.data(), side[0].x, bytes, a);
            gpu::stream_sync(a);
            if (back != xh) {
                std::fprintf(stderr, "gpu_handoff: the rows that came back differ from the rows sent\n");
                std::exit(1);
            }
        }
        for (int si = 0; si < 2; ++si) {
            gpu::set_device(si == 0 ? o.dev : dev_b);
            gpu::dev_free(side[si].ids);
            gpu::dev_free(side[si].words);
            gpu::dev_free(side[si].x);
        }
        gpu::set_device(o.dev);
        gpu::host_free(pay);
        return s;
    }

    // Microseconds per boundary crossed, or a negative value when a wait failed.
    double us() {
        constexpr int kShort = 32;
        double best = 1e30;
        for (int r = 0; r < o.reps + 1; ++r) {
            const double s1 = run(kShort, false);
            const double s2 = run(kMaxWindows, r == 0);
            if (s1 < 0 || s2 < 0) return -1.0;
            if (r > 0) best = std::min(best, (s2 - s1) / (2.0 * (kMaxWindows - kShort)) * 1e6);
        }
        return best;
    }
};

void row(const char* what, const std::string& sides, double us) {
    if (us < 0)
        std::printf("| %s | %s | timed out (the runtime did not run the two sides at once) |\n", what, sides.c_str());
    else std::printf("| %s | %s | %.2f |\n", what, sides.c_str(), us);
}

}  // namespace

int main(int argc, char** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--device" && i + 1 < argc) o.dev = std::atoi(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) o.reps = std::max(1, std::atoi(argv[++i]));
        else if (a == "--n-embd" && i + 1 < argc) o.n_embd = std::max(1, std::atoi(argv[++i]));
        else if (a == "--timeout-ms" && i + 1 < argc) o.timeout_ms = std::max(1, std::atoi(argv[++i]));
        else {
            std::printf("usage: gpu_handoff [--device N] [--reps N] [--n-embd N] [--timeout-ms N]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    try {
        std::string why;
        const int count = gpu::device_count(&why);
        if (count <= o.dev) {
            std::printf("gpu_handoff: no %s device %d (%s)\n", gpu::backend_name(), o.dev, why.c_str());
            return 0;
        }
        const int other = count > 1 ? (o.dev + 1) % count : -1;
        gpu::set_device(o.dev);
        const gpu::Stream a = gpu::stream_create(), b = gpu::stream_create();
        gpu::Stream c = nullptr;  // the other device's
        if (other >= 0) {
            gpu::set_device(other);
            c = gpu::stream_create();
            gpu::set_device(o.dev);
        }
        const std::string me = std::string(gpu::backend_name()) + ":" + std::to_string(o.dev);
        std::printf("%s %s; best of %d, each the difference of a long and a short run\n\n", me.c_str(),
                    gpu::device_name(o.dev).c_str(), o.reps);
        std::printf("| hand-off | between | us per wake-up |\n|---|---|---:|\n");
        row("the ready word alone", me + " and a host thread", flag_us(o, -1, a, nullptr));
        row("the ready word alone", me + ", two streams", flag_us(o, o.dev, a, b));
        if (other >= 0) {
            const std::string you = std::string(gpu::backend_name()) + ":" + std::to_string(other);
            row("the ready word alone", me + " and " + you, flag_us(o, other, a, c));
        }
        for (const int64_t rows : {1, 4}) {
            const std::string what = "stage boundary, " + std::to_string(rows) + " x " + std::to_string(o.n_embd) +
                                     " floats (publish, wait, payload copy)";
            row(what.c_str(), me + ", two streams", Boundary{o, o.dev, a, b, rows}.us());
            if (other >= 0)
                row(what.c_str(), me + " and " + std::string(gpu::backend_name()) + ":" + std::to_string(other),
                    Boundary{o, other, a, c, rows}.us());
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_handoff: %s\n", e.what());
        return 1;
    }
}

#endif
