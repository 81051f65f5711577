// An MoE layer's experts over a few rows (a verify window), one expert per task: a
// thread quantizes the expert's rows once, runs its gate and up, SwiGLU inside the
// down's quantization, and its down, and writes the result rows where they go. Against
// one parallel run of all the experts' gates and ups and another of their downs
// (matmul_grouped, where every thread takes a share of every expert's rows), nothing is
// shared between the threads but the finished rows: no activation is quantized by one
// core and read by another, no thread waits between the two runs, and no thread copies
// the results out alone. Each output element is computed as matmul computes it: the
// same bits.
#pragma once
#include <cstdint>
#include <span>

#include "engine/core/thread_pool.h"
#include "engine/quant/mat_view.h"

namespace strata {

struct ExpertFfn {
    MatView gate, up, down;
    MatIn in;                // the expert's rows (in.rows: which rows of in.x, e.g. tokens)
    float* y;                // the result's rows: y + out_rows[i] * ldy (out_rows null: i)
    int64_t ldy;
    const int32_t* out_rows;
};

// Runs every expert, one task each (ThreadPool::run: a thread that finishes its range
// takes the others' tasks), those of at least twice the mean work first. The experts'
// gates (and ups, and downs) may differ in size.
void moe_ffn(ThreadPool& pool, std::span<const ExpertFfn> experts);

}  // namespace strata
