#include "kernels/cpu/act_quant.h"

#include <cmath>

namespace strata {

void ActQ::reserve(int64_t n_in, int64_t n_tok) {
    n = n_in;
    nb = n_in / 32;
    T = n_tok;
    const size_t nq = static_cast<size_t>(n_in * n_tok), nd = static_cast<size_t>(nb * n_tok);
    if (q.size() < nq) q.resize(nq);
    if (d.size() < nd) d.resize(nd), s.resize(nd);
}

void quantize_act_token(const float* x, int64_t t, ActQ& a) {
    int8_t* q = a.q.data() + t * a.n;
    for (int64_t b = 0; b < a.nb; ++b) {
        const float* xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
        const float d = amax / 127.0f;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) {
            // |x * id| <= 127 up to rounding; the clamp also maps NaN to 0.
            float v = xb[i] * id;
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            const int qi = v == v ? static_cast<int>(std::nearbyint(v)) : 0;
            q[32 * b + i] = static_cast<int8_t>(qi);
            sum += qi;
        }
        a.d[static_cast<size_t>(t * a.nb + b)] = d;
        a.s[static_cast<size_t>(t * a.nb + b)] = sum;
    }
}

}  // namespace strata
