// y = x · Wᵀ for a weight matrix in any supported block format. The quantized types take
// the integer path (matmul_q.h): each token of x is quantized on its own to 8-bit blocks
// of 32 and multiplied by integer dot products. F32, F16 and BF16 (and Q8_K) are
// converted on the fly, row by row, and multiplied in f32. Either way each output
// element is one task's fixed sequence of operations: the result for a token does not
// depend on how many tokens share the call, on the number of threads, or (integer path)
// on the instruction set chosen at run time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/core/thread_pool.h"
#include "engine/quant/mat_view.h"
#include "engine/quant/types.h"

namespace strata {

struct ActQ;

// x: [T, n_in] f32 with row stride ldx (floats); y: [T, n_out] with row stride ldy.
void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
            int64_t ldy);


// Several weights with the same n_in applied to the same x (a layer's q, k and v; an
// FFN's gate and up): exactly the results of one matmul per weight, with x quantized
// once and all the rows in one parallel run (one hand-off to the threads instead of one
// per weight).
void matmul_multi(ThreadPool& pool, std::span<const MatOut> outs, const float* x, int64_t ldx, int64_t T);

// Several activations, and weights each applied to one of them: outs[i] = ins[in_of[i]].x ·
// outs[i].wᵀ (an MoE layer's experts, each over its own tokens). Exactly the results of
// one matmul per output, each activation quantized once, all in one parallel run (one
// hand-off to the threads instead of one per expert and weight).
void matmul_grouped(ThreadPool& pool, std::span<const MatIn> ins, std::span<const MatOut> outs, std::span<const int> in_of);

// Products on the calling thread, for work split some other way (moe_ffn: one expert per
// task): x in any MatIn form, quantized once into a (the caller's buffers; the integer
// path), then every row of each output (all of one n_in). The same bits as matmul.
void matmul_here(const MatIn& x, std::span<const MatOut> outs, ActQ& a);

// Repacking at load time. Every integer-path type has a packed layout (matmul_q.h): 16
// rows interleaved in groups of four values, so one vector instruction multiplies the same
// four activations into 16 rows. packed_size is 0 for F32, F16, BF16 (and Q8_K).
// pack_weights writes packed_size(w) bytes to dst (64-byte aligned); a MatView with
// packed = dst gives the same matmul results, bit for bit, as without.
size_t packed_size(const MatView& w);
void pack_weights(const MatView& w, void* dst);

// The integer path's instruction set: the name of the one in use ("scalar", "avx2",
// "avx-vnni", "avx512-vnni" or "amx"), and a way to choose a lower one (benchmarks; the results are
// the same bits on every path). Forcing one also narrows the float kernels' vectors to
// what a CPU with only that instruction set runs (simd::force_vector_bits: 128 bits for
// "scalar", 256 for "avx2" and "avx-vnni"). force_int_path throws strata::Error for an
// unknown name or one this CPU does not run; "" goes back to the best the CPU runs.
const char* int_path_name();
void force_int_path(std::string_view name);
// The path a decode step (one token) of packed weights of `type` runs: int_path_name(),
// except where a faster one gives the same bits (packed Q8_0 decode takes "avx-vnni" on
// CPUs that have it beside AVX-512 VNNI, unless a path is forced).
const char* int_decode_path_name(GgmlType type);

// Plain reference: each element in double precision. For tests.
void matmul_ref(const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy);

}  // namespace strata
