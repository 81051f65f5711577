// Attention of one token against a KV cache: the query heads that share one KV head,
// over that head's cached rows. The result is the same fixed sequence of float
// operations on every instruction set and whatever the window or thread count:
//   s[j][u] = simd::dot(q_j, k_u, head_dim) * scale            (u in position order)
//   p[j]    = softmax of s[j] with simd::exp, in 16 lanes (attention.cpp: softmax_rows)
//   o_j[i]  = sum_u p[j][u] * v_u[i]   (a multiply then an add, from 0, in position order)
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/quant/types.h"

namespace strata::ops {

// The cached rows of one KV head: position u's head_dim values at base + u * stride, in
// block format `type` (f32, f16, q8_0, q4_0). Rows back to back (stride = one row's
// bytes) are converted many at a time.
struct KvRows {
    GgmlType type = GgmlType::F16;
    const uint8_t* base = nullptr;
    size_t stride = 0;
};

// n_heads query heads (head j at q + j * q_stride, head_dim values) against positions
// [0, n_pos) of k and v; head j's result (head_dim_v values) goes to out + j * out_stride.
void attend(const float* q, int64_t q_stride, int64_t n_heads, int64_t head_dim, int64_t head_dim_v, float scale,
            const KvRows& k, const KvRows& v, int64_t n_pos, float* out, int64_t out_stride);

// n_tok consecutive tokens of one sequence at once (a prompt): token i's head j at
// q + i * q_tok + j * q_stride attends positions [0, n_pos0 + i), its result at
// out + i * out_tok + j * out_stride. Each cached row is converted once for all of them;
// every token's result is the same floats as attend() gives it alone.
void attend_tokens(const float* q, int64_t q_tok, int64_t q_stride, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                   int64_t head_dim_v, float scale, const KvRows& k, const KvRows& v, int64_t n_pos0, float* out,
                   int64_t out_tok, int64_t out_stride);

}  // namespace strata::ops
