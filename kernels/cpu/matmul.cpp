#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "engine/core/error.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul_q.h"
#include "kernels/cpu/simd.h"

// GCC contracts a * b + c into an FMA by default in C++ (-ffp-contract=fast, even with
// -std=c++20) in the x86-64-v3/v4 clones below but cannot in the default one: keep every
// clone to separate multiplies and adds so the f32 path agrees across instruction sets.
#pragma GCC optimize("fp-contract=off")

namespace strata {
namespace {

constexpr int kRowTile = 4;    // weight rows dequantized together
constexpr int kTokTile = 4;    // tokens sharing those rows
constexpr int64_t kRowsPerTask = 16;

// rows[r] (n floats each) times x[t] for a tile of up to kRowTile rows and kTokTile
// tokens. The per-element computation is the same whatever the tile sizes.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
void tile_dot(const float* rows, int nr, int64_t n, const float* x, int64_t ldx, int nt, float* out,
              int64_t ldo) {
    using simd::vf;
    const int64_t nv = n / simd::kLanes * simd::kLanes;
    vf acc[kRowTile][kTokTile];
    for (int r = 0; r < kRowTile; ++r)
        for (int t = 0; t < kTokTile; ++t) acc[r][t] = simd::zero();
    for (int64_t i = 0; i < nv; i += simd::kLanes) {
        vf xv[kTokTile];
        for (int t = 0; t < nt; ++t) xv[t] = simd::load(x + t * ldx + i);
        for (int r = 0; r < nr; ++r) {
            const vf wv = simd::load(rows + r * n + i);
            for (int t = 0; t < nt; ++t) acc[r][t] += wv * xv[t];
        }
    }
    for (int r = 0; r < nr; ++r)
        for (int t = 0; t < nt; ++t) {
            float s = simd::hsum(acc[r][t]);
            for (int64_t i = nv; i < n; ++i) s += rows[r * n + i] * x[t * ldx + i];
            out[t * ldo + r] = s;
        }
}

// Integer-dot path (matmul_q.h): quantize each token of x on its own, then give each
// task a fixed range of rows for all tokens.
void matmul_q(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy) {
    // Grow-only, per calling thread: no allocation once the largest shape has been seen.
    thread_local ActQ act;
    act.reserve(w.n_in, T);
    struct Ctx {
        const float* x;
        int64_t ldx;
        ActQ* a;
        kq::Job job;
        int64_t rows_per_task;
        void (*fn)(const kq::Job&, int64_t, int64_t);
    } c{x, ldx, &act, {&w, &act, y, ldy}, 0, nullptr};
    if (T >= 4 && pool.size() > 1)
        pool.run(T, [p = &c](int64_t t) { quantize_act_token(p->x + t * p->ldx, t, *p->a); });
    else
        for (int64_t t = 0; t < T; ++t) quantize_act_token(x + t * ldx, t, act);
    switch (kq::active()) {
    case kq::Isa::Avx512Vnni: c.fn = kq::rows_avx512; break;
    case kq::Isa::Avx2: c.fn = kq::rows_avx2; break;
    default: c.fn = kq::rows_scalar; break;
    }
    // About eight tasks per thread, in multiples of the 4-row tile. Which task computes a
    // row never changes the row's result, only the balance.
    const int64_t target = static_cast<int64_t>(pool.size()) * 8;
    const int64_t rpt = std::max<int64_t>(4, ((w.n_out + target - 1) / target + 3) / 4 * 4);
    c.rows_per_task = rpt;
    const int64_t n_tasks = (w.n_out + rpt - 1) / rpt;
    pool.run(n_tasks, [p = &c](int64_t task) {
        const int64_t r0 = task * p->rows_per_task;
        p->fn(p->job, r0, std::min(p->job.w->n_out, r0 + p->rows_per_task));
    });
}

void matmul_f32(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
                int64_t ldy) {
    const int64_t n = w.n_in;
    const bool is_f32 = w.type == GgmlType::F32;
    const int64_t n_tasks = (w.n_out + kRowsPerTask - 1) / kRowsPerTask;
    pool.run(n_tasks, [&](int64_t task) {
        thread_local std::vector<float> buf;
        if (!is_f32 && buf.size() < static_cast<size_t>(kRowTile * n)) buf.resize(static_cast<size_t>(kRowTile * n));
        const int64_t r_end = std::min(w.n_out, (task + 1) * kRowsPerTask);
        for (int64_t r0 = task * kRowsPerTask; r0 < r_end; r0 += kRowTile) {
            const int nr = static_cast<int>(std::min<int64_t>(kRowTile, r_end - r0));
            const float* rows;
            if (is_f32 && w.row_stride == static_cast<size_t>(n) * sizeof(float)) {
                rows = reinterpret_cast<const float*>(w.row(r0));
            } else {
                for (int r = 0; r < nr; ++r) dequantize_row(w.type, w.row(r0 + r), buf.data() + r * n, n);
                rows = buf.data();
            }
            for (int64_t t0 = 0; t0 < T; t0 += kTokTile) {
                const int nt = static_cast<int>(std::min<int64_t>(kTokTile, T - t0));
                tile_dot(rows, nr, n, x + t0 * ldx, ldx, nt, y + t0 * ldy + r0, ldy);
            }
        }
    });
}

}  // namespace

void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
            int64_t ldy) {
    STRATA_CHECK(w.n_in > 0 && w.n_out > 0, "matmul: empty weight {}x{}", w.n_out, w.n_in);
    STRATA_CHECK(ldx >= w.n_in && ldy >= w.n_out, "matmul: strides {} / {} too small", ldx, ldy);
    if (T <= 0) return;
    if (kq::supported(w.type))
        matmul_q(pool, w, x, ldx, T, y, ldy);
    else
        matmul_f32(pool, w, x, ldx, T, y, ldy);
}

void matmul_ref(const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy) {
    std::vector<float> row(static_cast<size_t>(w.n_in));
    for (int64_t r = 0; r < w.n_out; ++r) {
        dequantize_row(w.type, w.row(r), row.data(), w.n_in);
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int64_t i = 0; i < w.n_in; ++i) s += static_cast<double>(row[i]) * x[t * ldx + i];
            y[t * ldy + r] = static_cast<float>(s);
        }
    }
}

}  // namespace strata
