// Graphs of a stream's work (recorder.h). A flush issues what the recorder collected:
//  - as a replay, when a graph was captured before for the very same key (every kernel,
//    grid and argument byte, every copy's addresses): one submission instead of one per
//    kernel, which is what a decode step of hundreds of small kernels needs;
//  - as a new capture, the second time a key comes (a shape seen once, such as one
//    prompt chunk, is not worth the capture's cost);
//  - one by one otherwise, and for a key whose capture the runtime refused.
// The replay is exact because the key holds everything a launch takes: the host still
// describes every window (the op calls compute the arguments), and only work that is
// byte for byte what the graph holds is replayed.
//
// CUDA and HIP capture the stream (thread-local capture mode); a CPU HIP runtime has no
// graphs, so there a "graph" keeps the collected launches and a replay issues them again,
// which runs the same decisions (what is replayed, when a flush happens) through the tests.
#include <cstring>

#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

thread_local Recorder* t_recorder = nullptr;

constexpr size_t kMaxGraphs = 64;   // captured graphs kept per stream (least recently used go)
constexpr size_t kMinNodes = 4;     // fewer pieces are issued one by one
constexpr size_t kMaxSeen = 4096;   // keys remembered as seen once (then forgotten together)

void check(gpuError_t e, const char* what) {
    if (e != gpuSuccess) fail("{} failed: {}", what, gpuGetErrorString(e));
}

uint64_t hash_key(const std::vector<uint8_t>& k) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ k.size();
    size_t i = 0;
    for (; i + 8 <= k.size(); i += 8) {
        uint64_t w;
        std::memcpy(&w, k.data() + i, 8);
        h = (h ^ (w * 0xC2B2AE3D27D4EB4Full)) * 0x9FB21C651E98DF25ull;
        h ^= h >> 29;
    }
    for (; i < k.size(); ++i) h = (h ^ k[i]) * 0x100000001B3ull;
    return h;
}

}  // namespace

Recorder* recorder_of(gpuStream_t s) {
    Recorder* r = t_recorder;
    return r != nullptr && r->stream() == s ? r : nullptr;
}

#if defined(STRATA_HIP_CPU)
struct Recorder::Graph {
    std::vector<Issue> work;
};
#else
struct Recorder::Graph {
    gpuGraphExec_t exec = nullptr;
};
#endif

Recorder::~Recorder() {
    if (t_recorder == this) t_recorder = nullptr;
    for (auto& [h, e] : cache_) drop(e.graph);
}

void Recorder::issue_direct() {
    for (Issue& f : pending_) f(stream_);
}

// The pending work captured into a graph, or null when the runtime refused it (the work
// is then not issued: the caller issues it one by one).
Recorder::Graph* Recorder::capture() {
#if defined(STRATA_HIP_CPU)
    return new Graph{std::move(pending_)};
#else
    if (gpuStreamBeginCapture(stream_, gpuStreamCaptureModeThreadLocal) != gpuSuccess) {
        (void)gpuGetLastError();
        return nullptr;
    }
    // A piece that fails to issue while capturing invalidates the capture; EndCapture
    // then reports it, and the caller issues the work one by one.
    bool issued = true;
    try {
        for (Issue& f : pending_) f(stream_);
    } catch (...) {
        issued = false;
    }
    gpuGraph_t g = nullptr;
    const bool ended = gpuStreamEndCapture(stream_, &g) == gpuSuccess && g != nullptr && issued;
    gpuGraphExec_t exec = nullptr;
    const bool made = ended && gpuGraphInstantiate(&exec, g) == gpuSuccess;
    if (g) (void)gpuGraphDestroy(g);
    if (!made) {
        (void)gpuGetLastError();  // the refusal is not the next launch's error
        return nullptr;
    }
    return new Graph{exec};
#endif
}

void Recorder::launch(Graph& g) {
#if defined(STRATA_HIP_CPU)
    for (Issue& f : g.work) f(stream_);
#else
    check(gpuGraphLaunch(g.exec, stream_), "graph launch");
#endif
}

void Recorder::drop(Graph* g) {
    if (!g) return;
#if !defined(STRATA_HIP_CPU)
    (void)gpuGraphExecDestroy(g->exec);
#endif
    delete g;
}

void Recorder::flush() {
    if (pending_.empty()) return;
    {
        // Cleared whatever happens below (a failed issue is the stream's error, reported
        // by the next sync, and must not be issued twice), and before on_flush, whose own
        // calls on the stream flush again.
        struct Clear {
            Recorder& r;
            ~Clear() {
                r.pending_.clear();
                r.key_.clear();
            }
        } clear{*this};
        issue();
    }
    if (on_flush_) on_flush_();
}

void Recorder::issue() {
    const uint64_t h = hash_key(key_);
    if (pending_.size() < kMinNodes || refused_.count(h)) {
        issue_direct();
        ++direct;
        return;
    }
    auto it = cache_.find(h);
    if (it != cache_.end() && it->second.key == key_) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        launch(*it->second.graph);
        ++replayed;
        return;
    }
    if (!seen_.count(h)) {
        if (seen_.size() >= kMaxSeen) seen_.clear();
        seen_.insert(h);
        issue_direct();
        ++direct;
        return;
    }
    Graph* g = capture();
    if (!g) {
        refused_.insert(h);
        ++failed;
        issue_direct();
        ++direct;
        return;
    }
    if (it != cache_.end()) {  // another key of the same hash: the newer one stays
        drop(it->second.graph);
        lru_.erase(it->second.lru);
        cache_.erase(it);
    }
    if (cache_.size() >= kMaxGraphs) {
        check(gpuStreamSynchronize(stream_), "stream synchronize");  // the oldest may still run
        const uint64_t old = lru_.back();
        lru_.pop_back();
        drop(cache_.at(old).graph);
        cache_.erase(old);
    }
    lru_.push_front(h);
    cache_.emplace(h, Entry{key_, g, lru_.begin()});
    launch(*g);
    ++captured;
}

// --- gpu.h ---

Graphs* graphs_create(Stream s, std::function<void()> on_flush) {
    return reinterpret_cast<Graphs*>(new Recorder(static_cast<gpuStream_t>(s), std::move(on_flush)));
}

void graphs_destroy(Graphs* g) { delete reinterpret_cast<Recorder*>(g); }

void graphs_attach(Graphs* g) { t_recorder = reinterpret_cast<Recorder*>(g); }

bool graphs_recording(const Graphs* g) { return g != nullptr && t_recorder == reinterpret_cast<const Recorder*>(g); }

void graphs_flush(Graphs* g) {
    if (g) reinterpret_cast<Recorder*>(g)->flush();
}

GraphStats graphs_stats(const Graphs* g) {
    if (!g) return {};
    const auto* r = reinterpret_cast<const Recorder*>(g);
    return {r->direct.load(std::memory_order_relaxed), r->captured.load(std::memory_order_relaxed),
            r->replayed.load(std::memory_order_relaxed), r->failed.load(std::memory_order_relaxed)};
}

void settle(Stream s) {
    if (Recorder* r = recorder_of(static_cast<gpuStream_t>(s))) r->flush();
}

void settle_thread() {
    if (t_recorder) t_recorder->flush();
}

}  // namespace strata::gpu
