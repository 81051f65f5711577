#include "kernels/cpu/moe_ffn.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul.h"

namespace strata {

namespace {

void run_expert(const ExpertFfn& e) {
    thread_local ActQ a;                 // grow-only, per thread
    thread_local std::vector<float> g, u, y;
    const int64_t T = e.in.T, f = e.gate.n_out, E = e.down.n_out;
    g.resize(static_cast<size_t>(T * f));
    u.resize(g.size());
    const MatOut gate_up[2] = {{e.gate, g.data(), f}, {e.up, u.data(), f}};
    matmul_here(e.in, gate_up, a);
    const MatIn mid{u.data(), f, T, nullptr, g.data()};  // silu(gate) * up
    if (!e.out_rows) {
        const MatOut down{e.down, e.y, e.ldy};
        matmul_here(mid, std::span<const MatOut>(&down, 1), a);
        return;
    }
    y.resize(static_cast<size_t>(T * E));
    const MatOut down{e.down, y.data(), E};
    matmul_here(mid, std::span<const MatOut>(&down, 1), a);
    for (int64_t i = 0; i < T; ++i)
        std::memcpy(e.y + e.out_rows[i] * e.ldy, y.data() + i * E, sizeof(float) * static_cast<size_t>(E));
}

}  // namespace

void moe_ffn(ThreadPool& pool, std::span<const ExpertFfn> experts) {
    const auto n = static_cast<int64_t>(experts.size());
    if (n == 0) return;
    // ThreadPool::run starts thread k on the k-th contiguous range of tasks: the experts
    // by rows, most first, dealt across the ranges, so that every thread starts on one of
    // the biggest and the last tasks left to take are small ones.
    thread_local std::vector<int32_t> by, order;
    thread_local std::vector<int64_t> next;
    by.resize(static_cast<size_t>(n));
    std::iota(by.begin(), by.end(), 0);
    std::stable_sort(by.begin(), by.end(), [&](int32_t i, int32_t j) { return experts[i].in.T > experts[j].in.T; });
    const int64_t th = std::min<int64_t>(pool.size(), n);
    next.resize(static_cast<size_t>(th));
    for (int64_t k = 0; k < th; ++k) next[static_cast<size_t>(k)] = n * k / th;
    order.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        int64_t k = i % th;
        while (next[static_cast<size_t>(k)] == n * (k + 1) / th) k = (k + 1) % th;  // that range is full
        order[static_cast<size_t>(next[static_cast<size_t>(k)]++)] = by[static_cast<size_t>(i)];
    }
    const int32_t* ord = order.data();  // the caller's (order is thread_local)
    pool.run(n, [&](int64_t task) { run_expert(experts[static_cast<size_t>(ord[task])]); });
}

}  // namespace strata
