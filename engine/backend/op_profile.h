// STRATA_CPU_PROFILE: where a CPU device's time goes, op by op. Each op of CpuOps is
// timed on the thread that calls it (the parallel part included: the pool's run returns
// when all threads are done), keyed by the op, its row count and, for products, the
// weight's shape, so a verify window's cost can be read against a decode step's. Off
// (a null profile), an op pays a pointer test and an empty name string.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace strata {

class OpProfile {
public:
    using Clock = std::chrono::steady_clock;
    // One call of `op` over `rows` rows; what: the weight's shape for products ("" else).
    void add(const char* op, int64_t rows, std::string what, Clock::duration took);
    // The table, the largest total first: op, rows, calls, total ms, us per call, share.
    std::string report() const;

private:
    struct Sum {
        int64_t calls = 0;
        Clock::duration took{};
    };
    std::map<std::tuple<std::string, int64_t, std::string>, Sum> sums_;
};

// Times its scope into `p` (no clock read when p is null).
class OpTimer {
public:
    OpTimer(OpProfile* p, const char* op, int64_t rows, std::string what = {})
        : p_(p), op_(op), rows_(rows), what_(p ? std::move(what) : std::string()) {
        if (p_) t0_ = OpProfile::Clock::now();
    }
    ~OpTimer() {
        if (p_) p_->add(op_, rows_, std::move(what_), OpProfile::Clock::now() - t0_);
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

private:
    OpProfile* p_;
    const char* op_;
    int64_t rows_;
    std::string what_;
    OpProfile::Clock::time_point t0_{};
};

}  // namespace strata
