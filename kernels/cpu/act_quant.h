// Activations quantized for integer dot products: per token, blocks of 32 values with
// one f32 scale d (x ~ d * q, q in [-127, 127]) and the block's integer sum of q (for
// weight formats with a per-block minimum). A token is always quantized on its own, so
// its blocks never depend on the other tokens of a window.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

struct ActQ {
    int64_t n = 0;   // values per token (a multiple of 32)
    int64_t nb = 0;  // blocks per token
    int64_t T = 0;
    std::vector<int8_t> q;   // [T, n]
    std::vector<float> d;    // [T, nb]
    std::vector<int32_t> s;  // [T, nb]  sum of the block's q

    const int8_t* qt(int64_t t) const { return q.data() + t * n; }
    const float* dt(int64_t t) const { return d.data() + t * nb; }
    const int32_t* st(int64_t t) const { return s.data() + t * nb; }
    // Grow-only: after the first call of a given size nothing is allocated.
    void reserve(int64_t n_in, int64_t n_tok);
};

// Quantizes token t of x (row stride ldx floats) into a. Plain scalar code compiled once:
// the bytes do not depend on the instruction set chosen for the dot products.
void quantize_act_token(const float* x, int64_t t, ActQ& a);

}  // namespace strata
