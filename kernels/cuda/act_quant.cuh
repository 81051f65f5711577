// The activation quantizer's arithmetic (kernels/cpu/act_quant.h's two int8 digits per
// value, one f32 scale per 32 values), shared by quantize_act (matmul_q.cu) and the ops
// that quantize what they write (fused.cu), so that both give the same bytes.
#pragma once
#include "kernels/cuda/compat.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

STRATA_DEV float clamp_abs(float v, float lim) { return v > lim ? lim : (v < -lim ? -lim : v); }

// Where quantize_act puts rows x n values in `scratch` (act_q_bytes of them).
STRATA_DEV_HOST ActQ act_q_at(void* scratch, int64_t n, int64_t rows) {
    const int64_t v = n * rows, vp = (v + 255) / 256 * 256;
    auto* base = static_cast<int8_t*>(scratch);
    auto* sums = reinterpret_cast<int32_t*>(base + 2 * vp);  // 8-byte aligned: read in pairs
    return ActQ{base, base + vp, reinterpret_cast<float*>(sums + n / 16 * rows), sums, n, rows};
}

// The value a thread of a grid over every value of a.rows x a.n takes (32 threads per
// 32-value block, quantize_act's grid): value k of block b of row t; `in` false past the
// end, where the thread takes the last block's place (it still shuffles, stores nothing).
struct ValueSlot {
    bool in;
    int k;
    int64_t t, b;
};
STRATA_DEV ValueSlot value_slot(const ActQ& a) {
    const int64_t nb = a.n / 32;
    const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const bool in = i < a.rows * nb;
    const int64_t j = in ? i : a.rows * nb - 1;
    return {in, static_cast<int>(threadIdx.x % 32), j / nb, j % nb};
}

// Value xv, at index k (0..31) of block b of row t, quantized into a: 32 threads per block
// of values, one value each (the CPU's quantize_scalar value for value: the block's
// largest magnitude is a maximum, whatever its order). Every thread of the warp calls it
// (a CPU HIP runtime's shuffles wait for the whole block); `in` false: a thread past the
// end, which shuffles and stores nothing (it should pass a value of a block in range or
// 0, so as not to disturb the others: blocks never straddle in and out).
STRATA_DEV void quant_value(float xv, int k, bool in, const ActQ& a, int64_t t, int64_t b) {
    const int64_t nb = a.n / 32;
    float amax = fabsf(xv);
    amax = amax == amax ? amax : 0.0f;  // NaN never wins
    // The maximum over the 32 threads of this block of values: within a warp of 32 they
    // are the warp; a warp of 64 holds two blocks, so only lanes of the same half meet.
    for (int m = 16; m > 0; m /= 2) {
        const float o = STRATA_SHFL_XOR(amax, m);
        amax = o > amax ? o : amax;
    }
    const float step = amax / 127.0f;
    const float id = step > 0.0f ? 1.0f / step : 0.0f;
    const float v = xv * id;
    const int qi = v == v ? static_cast<int>(rintf(clamp_abs(v, 127.0f))) : 0;
    const float rem = (v - static_cast<float>(qi)) * 128.0f;
    const int ri = rem == rem ? static_cast<int>(rintf(clamp_abs(rem, 64.0f))) : 0;
    // The sums of each 16 values' digits, which the formats with a minimum multiply by
    // it: once here, not in every weight row's product (integers: any order is exact).
    int sum = 128 * qi + ri;
    for (int m = 8; m > 0; m /= 2) sum += STRATA_SHFL_XOR(sum, m);
    if (!in) return;
    a.q[t * a.n + 32 * b + k] = static_cast<int8_t>(qi);
    a.r[t * a.n + 32 * b + k] = static_cast<int8_t>(ri);
    if (k == 0) a.d[t * nb + b] = step * (1.0f / 128.0f);
    if (k % 16 == 0) a.s[t * (a.n / 16) + 2 * b + k / 16] = sum;
}

}  // namespace strata::gpu
