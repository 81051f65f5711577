#include "kernels/cpu/act_quant.h"

#include <cmath>

namespace strata {

void ActQ::reserve(int64_t n_in, int64_t n_tok) {
    n = n_in;
    nb = n_in / 32;
    T = n_tok;
    const size_t nq = static_cast<size_t>(n_in * n_tok), nd = static_cast<size_t>(nb * n_tok);
    if (q.size() < nq) q.resize(nq), r.resize(nq);
    if (d.size() < nd) d.resize(nd), s.resize(nd);
}

namespace {

// Round half to even by the 1.5 * 2^23 trick (|v| <= 2^22): no libm call, the same
// result as nearbyint in the default rounding mode.
inline int round_even(float v) { return static_cast<int>((v + 12582912.0f) - 12582912.0f); }

inline float clamp(float v, float lim) { return v > lim ? lim : (v < -lim ? -lim : v); }

}  // namespace

void quantize_act_token(const float* x, int64_t t, ActQ& a) {
    int8_t* q = a.q.data() + t * a.n;
    int8_t* r = a.r.data() + t * a.n;
    for (int64_t b = 0; b < a.nb; ++b) {
        const float* xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) {
            const float v = std::fabs(xb[i]);
            amax = v > amax ? v : amax;  // NaN never wins
        }
        const float step = amax / 127.0f;
        const float id = step > 0.0f ? 1.0f / step : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) {
            // The clamps keep rounding slop in range; a NaN input becomes 0.
            const float v = xb[i] * id;
            const int qi = v == v ? round_even(clamp(v, 127.0f)) : 0;
            const float rem = (v - static_cast<float>(qi)) * 128.0f;
            const int ri = rem == rem ? round_even(clamp(rem, 64.0f)) : 0;
            q[32 * b + i] = static_cast<int8_t>(qi);
            r[32 * b + i] = static_cast<int8_t>(ri);
            sum += 128 * qi + ri;
        }
        a.d[static_cast<size_t>(t * a.nb + b)] = step * (1.0f / 128.0f);  // exact: a power of two
        a.s[static_cast<size_t>(t * a.nb + b)] = sum;
    }
}

}  // namespace strata
