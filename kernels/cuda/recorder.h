// A stream's work collected for a graph (graph.cu): while a recorder is attached on a
// thread, the launch helper (compat.h) and the runtime's copies and memsets on its stream
// add their work here instead of issuing it. Each piece brings its key (the bytes that
// say what it is: the kernel, its grid, every argument) and how to issue it; flush issues
// the lot, as a replay of a graph captured for the very same key, a new capture, or one
// by one (graph.cu says when). Every other runtime call on the stream (a sync, an event,
// a wait) flushes first, so nothing the host waits for stays behind in a recorder.
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace strata::gpu {

class Recorder;

// The recorder collecting this thread's work on stream s, or null (issue it now).
Recorder* recorder_of(gpuStream_t s);

class Recorder {
public:
    using Issue = std::function<void(gpuStream_t)>;
    Recorder(gpuStream_t s, std::function<void()> on_flush) : stream_(s), on_flush_(std::move(on_flush)) {}
    ~Recorder();
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

    gpuStream_t stream() const { return stream_; }
    void key(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        key_.insert(key_.end(), b, b + n);
    }
    template <typename T>
    void key_of(const T& v) {
        key(&v, sizeof v);
    }
    void add(Issue issue) { pending_.push_back(std::move(issue)); }
    bool empty() const { return pending_.empty(); }
    // Issues what was collected (nothing when empty), then calls on_flush.
    void flush();

    // Flushes of each kind, and captures the runtime refused (issued one by one). Read
    // by other threads (a runner's stats) while this one records.
    std::atomic<int64_t> direct{0}, captured{0}, replayed{0}, failed{0};

private:
    struct Graph;
    void issue();  // flush's decision
    void issue_direct();
    Graph* capture();
    void launch(Graph& g);
    void drop(Graph* g);

    gpuStream_t stream_;
    std::function<void()> on_flush_;
    std::vector<Issue> pending_;
    std::vector<uint8_t> key_;
    struct Entry {
        std::vector<uint8_t> key;
        Graph* graph;
        std::list<uint64_t>::iterator lru;
    };
    std::unordered_map<uint64_t, Entry> cache_;  // by the key's hash
    std::list<uint64_t> lru_;                    // most recently used first
    std::unordered_set<uint64_t> seen_;          // keys flushed once (captured the second time)
    std::unordered_set<uint64_t> refused_;       // keys whose capture failed: never tried again
};

}  // namespace strata::gpu
