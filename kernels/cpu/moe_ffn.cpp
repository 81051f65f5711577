#include "kernels/cpu/moe_ffn.h"

#include <algorithm>
#include <cstring>
#include <utility>
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
    // Tasks of at least twice the mean work first, largest first (a shared expert runs
    // over every row of the window, four times an average routed expert's): the pool gives
    // thread 0 the front of the list and lets a thread that runs out take the rest, so a
    // large task left for last no longer keeps one thread busy while the other waits. The
    // rest keep their order: experts in id order lie in order in their tensors.
    thread_local std::vector<std::pair<int64_t, int32_t>> by_work;  // grow-only
    auto& order = by_work;  // the caller's: a thread_local named in the task would be the worker's own
    order.clear();
    int64_t total = 0;
    for (size_t i = 0; i < experts.size(); ++i) {
        const ExpertFfn& e = experts[i];
        const int64_t work = e.in.T * ((e.gate.n_out + e.up.n_out) * e.gate.n_in + e.down.n_out * e.down.n_in);
        order.push_back({work, static_cast<int32_t>(i)});
        total += work;
    }
    const int64_t big = 2 * total / std::max<int64_t>(1, static_cast<int64_t>(order.size()));
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
        const int64_t ka = a.first >= big ? a.first : 0, kb = b.first >= big ? b.first : 0;
        return ka > kb;
    });
    pool.run(static_cast<int64_t>(order.size()),
             [&](int64_t t) { run_expert(experts[static_cast<size_t>(order[static_cast<size_t>(t)].second)]); });
}

}  // namespace strata
