// A fixed pool of worker threads for data-parallel kernels. The calling thread takes
// part, so a pool of n threads starts n - 1 workers. Work is split into tasks that
// the threads claim from a shared counter; kernels make each output element the work
// of exactly one task, so results never depend on the thread count or the claim order.
//
// Waiting: between runs a worker spins on the run counter for a while (kSpinMicros)
// before it sleeps on a condition variable, and the caller spins the same way for the
// workers to finish; back-to-back runs (a decode step is hundreds of small ones) then
// cost no futex wake. The protocol is in thread_pool.cpp.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata {

// One turn of a spin-wait loop: a pause (frees the core's shared resources and saves
// power while the awaited store arrives).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

class ThreadPool {
public:
    // on_start(i) runs first on worker i (1 .. n_threads - 1; the caller is thread 0),
    // e.g. to pin it to a core.
    explicit ThreadPool(int n_threads, std::function<void(int)> on_start = {});
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Runs fn(task) for task in [0, n_tasks) across the pool and returns when all are
    // done. Not reentrant: fn must not call run on the same pool. An exception thrown
    // by fn is rethrown here (the first one; the remaining tasks still run). Thread i
    // claims tasks from its own contiguous range first (the same range for the same
    // n_tasks on every run, so the data of those tasks stays in its core's cache), then
    // from the others' ranges.
    void run(int64_t n_tasks, const std::function<void(int64_t)>& fn);

    // Runs fn(i) once on each thread i of the pool (0: the caller, 1 .. size() - 1: the
    // workers, always the same one for an index) and returns when all are done. For work
    // whose data should stay with one core from run to run: on a machine whose cores do
    // not share a cache, a line written by one core and read by the other crosses
    // between them on every run. fn(i) must not wait for fn(j): a worker may start late.
    void run_each(const std::function<void(int)>& fn);

    // Splits [0, n) into chunks of at least `grain` and runs fn(begin, end) for each.
    void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

private:
    void worker_loop(int index);
    void work(int index);
    void start(int64_t n_tasks);
    void finish();
    void finish_one();  // a worker leaves the current run

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    std::atomic<uint64_t> generation_{0};  // bumped for each run; workers wait for a new value
    std::atomic<bool> stop_{false};
    std::atomic<int> sleepers_{0};         // workers asleep (or about to sleep) on cv_start_
    std::atomic<bool> caller_asleep_{false};
    const std::function<void(int64_t)>* fn_ = nullptr;
    const std::function<void(int)>* each_ = nullptr;  // run_each's fn (then fn_ is null)
    // Per thread: the next unclaimed task of its range, and the range's end; one cache
    // line each, so a thread's claims in its own range touch no other core's line.
    struct alignas(64) Range {
        std::atomic<int64_t> next{0};
        int64_t end = 0;
    };
    std::vector<Range> ranges_;
    std::atomic<int> active_{0};  // workers still inside the current run
    std::exception_ptr error_;    // guarded by mu_
};

}  // namespace strata
