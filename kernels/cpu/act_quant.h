// Activations quantized for integer dot products: per token, blocks of 32 values, each
// value as two int8 digits, x ~ d * (128 * q + r) with q in [-127, 127] (x rounded to
// amax / 127) and r in [-64, 64] (the remainder rounded to 1/128 of that step), one f32
// scale d per block and the block's integer sum of (128 q + r) (for weight formats with
// a per-block minimum). One int8 digit alone costs ~0.5% relative error per product,
// which compounds over the layers past what the model tests allow; the second digit
// brings it to ~0.005% for one more integer dot product per block, which decode (bound
// by reading the weights) does not notice. A token is always quantized on its own, so
// its blocks never depend on the other tokens of a window.
//
// For the VNNI kernels each block also carries c[l] = -(sum of 128 q + r over values
// 4l .. 4l+3), l = 0..7: vpdpbusd multiplies unsigned by signed bytes, so a signed weight
// w enters as w + 128 and c cancels the 128 * x that this adds (matmul_q_simd.inc).
// The formats with 16-value sub-scales (Q6_K, Q3_K, Q2_K, IQ2_XS, IQ2_S, IQ1_M) correct per
// half block: h[k] = c[4k] + .. + c[4k + 3], k = 0, 1, kept beside c so that their window
// tiles load one word where they summed four (scalar adds and a move to a vector for
// every group, block and token: about a tenth of a Q6_K window tile's time).
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

struct ActQ {
    // Arrays of per-block values are padded by this many entries so that a kernel may
    // load a whole group of 8 blocks at the end of a token (the extra lanes are unused).
    static constexpr int64_t kPad = 8;
    // The digits' bounds: |q| <= kMaxQ, |r| <= kMaxR (the kernels' int16 sums rely on them).
    static constexpr int kMaxQ = 127, kMaxR = 64;

    int64_t n = 0;   // values per token (a multiple of 32)
    int64_t nb = 0;  // blocks per token
    int64_t T = 0;
    std::vector<int8_t> q;   // [T, n]  high digit
    std::vector<int8_t> r;   // [T, n]  low digit
    std::vector<float> d;    // [T, nb] (+ kPad)
    std::vector<int32_t> s;  // [T, nb] (+ kPad)  sum of the block's 128 q + r
    std::vector<int32_t> c;  // [T, nb, 8]  minus the four-value sums of 128 q + r
    std::vector<int32_t> h;  // [T, nb, 2]  minus the half-block (16-value) sums of 128 q + r

    const int8_t* qt(int64_t t) const { return q.data() + t * n; }
    const int8_t* rt(int64_t t) const { return r.data() + t * n; }
    const float* dt(int64_t t) const { return d.data() + t * nb; }
    const int32_t* st(int64_t t) const { return s.data() + t * nb; }
    const int32_t* ct(int64_t t) const { return c.data() + t * nb * 8; }
    const int32_t* ht(int64_t t) const { return h.data() + t * nb * 2; }
    // Grow-only: after the first call of a given size nothing is allocated.
    void reserve(int64_t n_in, int64_t n_tok);
};

// Quantizes token t of x (the token's n values) into a. The bytes are the same on every
// instruction set: the AVX-512 version does the same IEEE operations per value as the
// scalar one (and max is order-independent), and tests compare the two.
void quantize_act_token(const float* x, int64_t t, ActQ& a);
// Blocks [b0, b1) of token t only (x: the token's first value): a block's bytes depend
// on its own 32 values, so a token may be quantized in parts, by several threads.
void quantize_act_blocks(const float* x, int64_t t, int64_t b0, int64_t b1, ActQ& a);
// The plain scalar version (tests).
void quantize_act_token_scalar(const float* x, int64_t t, ActQ& a);

}  // namespace strata
