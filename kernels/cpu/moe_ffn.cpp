#include "kernels/cpu/moe_ffn.h"

#include <cstring>
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
    pool.run(static_cast<int64_t>(experts.size()), [&](int64_t e) { run_expert(experts[static_cast<size_t>(e)]); });
}

}  // namespace strata
