// The every-op, every-backend harness (in the spirit of ggml's test-backend-ops): each op
// of engine/backend/ops.h on each backend present, on random shapes (odd sizes, one row,
// many rows, every weight type the op reads), against the plain references of
// tests/ops_reference.h, within the tolerance the op states, and bit for bit across
// thread counts where its canonical order promises that. A GPU backend joins by adding
// itself to backends(). Closes with "ops: N ops x M backends, K cases passed".
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "engine/backend/cpu_ops.h"
#include "engine/backend/device.h"
#include "engine/backend/handoff.h"
#include "engine/quant/types.h"
#include "tests/ops_reference.h"

using namespace strata;

namespace {

// A backend under test, with a second instance of the same kind on another thread count
// (the op's result must not depend on it where the op says so).
struct Backend {
    std::string name;
    std::unique_ptr<ThreadPool> pool, pool1;
    std::unique_ptr<Ops> ops, ops1;
};

std::vector<Backend> backends() {
    std::vector<Backend> out;
    Backend cpu;
    cpu.name = "cpu";
    cpu.pool = std::make_unique<ThreadPool>(3);
    cpu.pool1 = std::make_unique<ThreadPool>(1);
    cpu.ops = std::make_unique<CpuOps>(*cpu.pool);
    cpu.ops1 = std::make_unique<CpuOps>(*cpu.pool1);
    out.push_back(std::move(cpu));
    return out;
}

using Floats = std::vector<float>;

// Checks of the harness: a Catch CHECK, also counted, so the closing line says whether
// every case passed.
int64_t g_failed = 0;
#define EXPECT(...)                          \
    do {                                     \
        if (!(__VA_ARGS__)) ++g_failed;      \
        CHECK(__VA_ARGS__);                  \
    } while (0)

struct Rng {
    std::mt19937 gen;
    explicit Rng(uint32_t seed) : gen(seed) {}
    Floats normal(size_t n, float sd = 1.0f) {
        std::normal_distribution<float> d(0.0f, sd);
        Floats v(n);
        for (float& x : v) x = d(gen);
        return v;
    }
    Floats uniform(size_t n, float lo, float hi) {
        std::uniform_real_distribution<float> d(lo, hi);
        Floats v(n);
        for (float& x : v) x = d(gen);
        return v;
    }
};

struct Weight {
    std::vector<uint8_t> bytes;
    MatView view;
};

Weight make_weight(Rng& rng, GgmlType type, int64_t n_in, int64_t n_out) {
    Weight w;
    const size_t rb = row_bytes(type, n_in);
    w.bytes.resize(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        const Floats f = rng.normal(static_cast<size_t>(n_in));
        quantize_row(type, f.data(), w.bytes.data() + rb * static_cast<size_t>(r), n_in);
    }
    w.view = {type, w.bytes.data(), n_in, n_out, rb, nullptr};
    return w;
}

// |got - want| <= atol + rtol * scale (scale: |want|, or the given magnitudes).
void close(const Floats& got, const ref::Vec& want, double rtol, double atol, const ref::Vec* scale = nullptr) {
    REQUIRE(got.size() == want.size());
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double lim = atol + rtol * (scale ? (*scale)[i] : std::fabs(want[i]));
        const double excess = std::fabs(got[i] - want[i]) - lim;
        if (excess > worst) worst = excess, at = i;
    }
    INFO("element " << at << ": got " << got[at] << ", want " << want[at]);
    EXPECT(worst == 0);
}

struct Harness {
    Backend& be;
    Rng rng{7};
    std::set<std::string> ops_seen;
    int64_t cases = 0;

    void ran(const char* op) {
        ops_seen.insert(op);
        ++cases;
    }

    void get_rows() {
        for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K})
            for (int64_t T : {1, 5}) {
                const Weight tab = make_weight(rng, type, 256, 40);
                const int32_t ids[5] = {0, 39, 7, 7, 21};
                Floats x(static_cast<size_t>(T * 256));
                const MatView table = be.ops->prepare_table(tab.view);
                ran("prepare_table");
                be.ops->get_rows(table, ids, Tensor::f32(x.data(), 256, T));
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t)
                    for (double v : ref::dequant(tab.view, ids[t])) want.push_back(v);
                close(x, want, 0, 0);
                const int32_t bad[1] = {40};
                CHECK_THROWS_WITH(be.ops->get_rows(tab.view, bad, Tensor::f32(x.data(), 256, 1)),
                                  Catch::Contains("token id 40 is out of range"));
                ran("get_rows");
            }
    }

    void norms() {
        for (int64_t n : {1, 7, 96, 257})
            for (int64_t T : {1, 3}) {
                const Floats x = rng.normal(static_cast<size_t>(n * T)), w = rng.normal(static_cast<size_t>(n));
                for (bool with_w : {true, false}) {
                    Floats y(x.size());
                    be.ops->rms_norm(Tensor::f32(x.data(), n, T), with_w ? w.data() : nullptr, 1e-6f,
                                     Tensor::f32(y.data(), n, T));
                    ref::Vec want;
                    for (int64_t t = 0; t < T; ++t)
                        for (double v : ref::rms_norm(x.data() + t * n, n, with_w ? w.data() : nullptr, 1e-6))
                            want.push_back(v);
                    close(y, want, 2e-6, 1e-6);
                    Floats inplace = x;  // y may be x
                    const Tensor t = Tensor::f32(inplace.data(), n, T);
                    be.ops->rms_norm(t, with_w ? w.data() : nullptr, 1e-6f, t);
                    EXPECT(inplace == y);
                    ran("rms_norm");
                }
            }
        for (int64_t head : {8, 24})
            for (int64_t T : {1, 4}) {
                const int64_t n = 3 * head;
                Floats x = rng.normal(static_cast<size_t>(n * T));
                const Floats z = rng.normal(x.size()), w = rng.normal(static_cast<size_t>(head));
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t h = 0; h < 3; ++h) {
                        const ref::Vec r = ref::rms_norm(x.data() + t * n + h * head, head, w.data(), 1e-6);
                        for (int64_t j = 0; j < head; ++j) want.push_back(r[j] * ref::silu(z[t * n + h * head + j]));
                    }
                be.ops->rms_norm_gated(Tensor::f32(x.data(), n, T), Tensor::f32(z.data(), n, T), w.data(), head, 1e-6f);
                close(x, want, 1e-5, 1e-6);
                ran("rms_norm_gated");
            }
        for (int64_t head : {16, 33})
            for (float scale : {1.0f, 0.25f}) {
                const int64_t T = 3, n = 5 * head, col0 = head;  // heads 1..3 of 5 normed
                Floats x = rng.normal(static_cast<size_t>(n * T));
                x[static_cast<size_t>(col0)] = 0;  // one head near zero: the eps floor is not hit by random data
                ref::Vec want(x.begin(), x.end());
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t g = 0; g < 3; ++g) {
                        double* v = want.data() + t * n + col0 + g * head;
                        double ss = 0;
                        for (int64_t i = 0; i < head; ++i) ss += v[i] * v[i];
                        const double inv = 1.0 / std::max(std::sqrt(ss), 1e-6);
                        for (int64_t i = 0; i < head; ++i) v[i] *= inv * scale;
                    }
                be.ops->l2_norm(Tensor::f32(x.data(), n, T), col0, 3, head, 1e-6f, scale);
                close(x, want, 2e-6, 1e-7);
                ran("l2_norm");
            }
    }

    void elementwise() {
        for (int64_t n : {1, 5, 1000, 4099}) {
            const Floats g = rng.normal(static_cast<size_t>(n), 3.0f), u = rng.normal(static_cast<size_t>(n));
            Floats y(g.size()), y1(g.size());
            be.ops->swiglu(Tensor::f32(g.data(), n, 1), Tensor::f32(u.data(), n, 1), Tensor::f32(y.data(), n, 1));
            be.ops1->swiglu(Tensor::f32(g.data(), n, 1), Tensor::f32(u.data(), n, 1), Tensor::f32(y1.data(), n, 1));
            ref::Vec want;
            for (int64_t i = 0; i < n; ++i) want.push_back(ref::silu(g[i]) * u[i]);
            close(y, want, 1e-5, 1e-6);
            EXPECT(y == y1);  // elementwise: the split across threads changes nothing
            ran("swiglu");

            Floats a = rng.normal(static_cast<size_t>(n));
            const Floats b = rng.normal(static_cast<size_t>(n));
            ref::Vec sum;
            for (int64_t i = 0; i < n; ++i) sum.push_back(double(a[i] + b[i]));  // f32 adds, exactly
            be.ops->add(Tensor::f32(a.data(), n, 1), Tensor::f32(b.data(), n, 1));
            close(a, sum, 0, 0);
            ran("add");
        }
        // Strided rows: copy and add on column ranges of wider rows.
        const Floats src = rng.normal(7 * 10);
        Floats dst(7 * 6, 0.0f);
        be.ops->copy(Tensor::f32(dst.data() + 1, 4, 7, 6), Tensor::f32(src.data() + 3, 4, 7, 10));
        for (int64_t r = 0; r < 7; ++r)
            for (int64_t c = 0; c < 6; ++c)
                EXPECT(dst[r * 6 + c] == (c >= 1 && c < 5 ? src[r * 10 + 3 + c - 1] : 0.0f));
        ran("copy");
        // A copy of megabytes (a snapshot of a recurrent state), which the CPU spreads over its pool.
        const Floats big = rng.normal(3001 * 130);
        Floats big_out(big.size(), 0.0f);
        be.ops->copy(Tensor::f32(big_out.data(), 130, 3001), Tensor::f32(big.data(), 130, 3001));
        EXPECT((big_out == big));
        ran("copy");

        // Memory: zeroed and aligned, host copies in and out exact, a prepared vector the same values.
        for (size_t bytes : {size_t{4}, size_t{1000}, size_t{3} << 20}) {
            const Buffer b = be.ops->alloc(bytes);
            EXPECT(b.size() == bytes);
            EXPECT(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
            std::vector<uint8_t> back(bytes, 1);
            be.ops->to_host(back.data(), b.data(), bytes);
            EXPECT(std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 0; }));
            ran("alloc");
            std::vector<uint8_t> pattern(bytes);
            for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
            be.ops->to_device(b.data(), pattern.data(), bytes);
            be.ops->to_host(back.data(), b.data(), bytes);
            EXPECT((back == pattern));
            ran("to_device");
            ran("to_host");
        }
        const Floats v = rng.normal(37);
        const float* pv = be.ops->prepare_vector(v);
        Floats pv_back(v.size());
        be.ops->to_host(pv_back.data(), pv, v.size() * sizeof(float));
        EXPECT((pv_back == v));
        ran("prepare_vector");
        Floats y = dst;
        be.ops->add(Tensor::f32(y.data(), 6, 7), Tensor::f32(src.data(), 6, 7, 10));
        for (int64_t r = 0; r < 7; ++r)
            for (int64_t c = 0; c < 6; ++c) EXPECT(y[r * 6 + c] == dst[r * 6 + c] + src[r * 10 + c]);
        ran("add");
    }

    void matmuls() {
        for (GgmlType type : supported_types()) {
            const int64_t bs = type_info(type).block_size;
            const int64_t n_in = bs >= 256 ? 512 : 256 + bs;  // odd block counts where the type allows
            for (int64_t n_out : {1, 33})
                for (int64_t T : {1, 6}) {
                    const Weight w = make_weight(rng, type, n_in, n_out);
                    const Floats x = rng.normal(static_cast<size_t>(T * n_in));
                    Floats y(static_cast<size_t>(T * n_out)), y1(y.size());
                    be.ops->matmul(w.view, Tensor::f32(x.data(), n_in, T), Tensor::f32(y.data(), n_out, T));
                    be.ops1->matmul(w.view, Tensor::f32(x.data(), n_in, T), Tensor::f32(y1.data(), n_out, T));
                    ref::Vec mag;
                    const ref::Vec want = ref::matmul(w.view, x.data(), T, &mag);
                    INFO(type_info(type).name << " n_out " << n_out << " T " << T);
                    // f32 sums; the integer path quantizes each row of x to 8 bits (|error| < 1/127
                    // of each |w x| term, in practice far less).
                    const bool float_w = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
                    close(y, want, float_w ? 1e-5 : 1e-2, 1e-5, &mag);
                    EXPECT(y == y1);
                    // One row of a many-row call is that row alone: batch invariance.
                    Floats solo(static_cast<size_t>(n_out));
                    be.ops->matmul(w.view, Tensor::f32(x.data() + (T - 1) * n_in, n_in, 1), Tensor::f32(solo.data(), n_out, 1));
                    EXPECT(std::equal(solo.begin(), solo.end(), y.begin() + (T - 1) * n_out));
                    ran("matmul");
                }
        }
        for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16}) {
            const int64_t n_in = 256, T = 3;
            const Weight a = make_weight(rng, type, n_in, 17), b = make_weight(rng, type, n_in, 5);
            const Floats x = rng.normal(static_cast<size_t>(T * n_in));
            Floats ya(static_cast<size_t>(T * 17)), yb(static_cast<size_t>(T * 5)), ra(ya.size()), rb(yb.size());
            const MatOut outs[2] = {{a.view, ya.data(), 17}, {b.view, yb.data(), 5}};
            be.ops->matmul_multi(outs, Tensor::f32(x.data(), n_in, T));
            be.ops->matmul(a.view, Tensor::f32(x.data(), n_in, T), Tensor::f32(ra.data(), 17, T));
            be.ops->matmul(b.view, Tensor::f32(x.data(), n_in, T), Tensor::f32(rb.data(), 5, T));
            EXPECT(ya == ra);  // exactly one matmul per weight
            EXPECT(yb == rb);
            ran("matmul_multi");
        }
    }

    // Two sequences in one batch (3 rows at position 4.., 2 rows at 0..), each with a cache.
    struct Seqs {
        SeqState a, b;
        Batch batch;
    };
    Seqs seqs(GgmlType cache, int64_t n_head_kv, int64_t hd, int64_t hdv) {
        Seqs s;
        for (SeqState* st : {&s.a, &s.b}) {
            st->n_ctx = 16;
            st->kv = std::make_unique<KvCache>(host_buffer, 1, 16, n_head_kv, hd, hdv, cache);
            st->kv_slot = {0};
        }
        s.batch.add(s.a, 4, 3);
        s.batch.add(s.b, 0, 2);
        return s;
    }

    void attention() {
        for (bool neox : {false, true})
            for (bool norm : {false, true}) {
                const int64_t hd = 32, n_heads = 3, stride = 2 * hd, T = 5;
                Seqs s = seqs(GgmlType::F16, 1, hd, hd);
                Floats x = rng.normal(static_cast<size_t>(T * n_heads * stride));
                const Floats w = rng.normal(static_cast<size_t>(hd));
                ref::Vec want(x.begin(), x.end());
                const RopeParams rp{hd - 8, neox, 10000.0f, 0.5f};
                for (int64_t t = 0; t < T; ++t) {
                    const int64_t pos = t < 3 ? 4 + t : t - 3;
                    for (int64_t h = 0; h < n_heads; ++h) {
                        double* v = want.data() + t * n_heads * stride + h * stride;
                        if (norm) {
                            const ref::Vec r = ref::rms_norm(x.data() + (v - want.data()), hd, w.data(), 1e-6);
                            std::copy(r.begin(), r.end(), v);
                        }
                        ref::rope(v, rp.n_rot, neox, pos, rp.freq_base, rp.freq_scale);
                    }
                }
                // Two sets in one call (q's 3 heads at stride 2 hd, k's 2 heads packed), and the
                // same sets one call each: the same floats.
                Floats k = rng.normal(static_cast<size_t>(T * 2 * hd)), k1 = k, x1 = x;
                ref::Vec want_k(k.begin(), k.end());
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t h = 0; h < 2; ++h)
                        ref::rope(want_k.data() + t * 2 * hd + h * hd, rp.n_rot, neox, t < 3 ? 4 + t : t - 3,
                                  rp.freq_base, rp.freq_scale);
                const RopeHeads both[2] = {{Tensor::f32(x.data(), n_heads * stride, T), n_heads, stride,
                                            norm ? w.data() : nullptr},
                                           {Tensor::f32(k.data(), 2 * hd, T), 2, hd, nullptr}};
                be.ops->norm_rope(s.batch, both, hd, 1e-6f, rp);
                close(x, want, 1e-5, 1e-5);
                close(k, want_k, 1e-5, 1e-5);
                const RopeHeads q_only[1] = {{Tensor::f32(x1.data(), n_heads * stride, T), n_heads, stride,
                                              norm ? w.data() : nullptr}};
                const RopeHeads k_only[1] = {{Tensor::f32(k1.data(), 2 * hd, T), 2, hd, nullptr}};
                be.ops1->norm_rope(s.batch, q_only, hd, 1e-6f, rp);
                be.ops1->norm_rope(s.batch, k_only, hd, 1e-6f, rp);
                EXPECT(x1 == x);
                EXPECT(k1 == k);
                ran("norm_rope");
            }
        for (GgmlType cache : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0})
            for (bool gated : {false, true}) {
                const AttnDims d{4, 2, 32, 32};
                const int64_t T = 5, stride = gated ? 2 * d.head_dim : d.head_dim, ldq = d.n_head * stride;
                const int64_t n_kv = d.n_head_kv * d.head_dim;
                Seqs s = seqs(cache, d.n_head_kv, d.head_dim, d.head_dim_v);
                // History: positions 0..3 of sequence a from an earlier window.
                for (int64_t p = 0; p < 4; ++p) {
                    const Floats k = rng.normal(static_cast<size_t>(n_kv)), v = rng.normal(static_cast<size_t>(n_kv));
                    s.a.kv->store(0, p, k.data(), v.data());
                }
                const Floats k = rng.normal(static_cast<size_t>(T * n_kv)), v = rng.normal(static_cast<size_t>(T * n_kv));
                be.ops->kv_store(s.batch, 0, Tensor::f32(k.data(), n_kv, T), Tensor::f32(v.data(), n_kv, T));
                std::vector<float> back(static_cast<size_t>(d.head_dim));
                dequantize_row(cache, s.b.kv->k_head(0, 1) + 1 * s.b.kv->k_stride(), back.data(), d.head_dim);
                Floats stored(k.begin() + 4 * n_kv + d.head_dim, k.begin() + 5 * n_kv);  // row 4 = b's position 1
                if (cache == GgmlType::F32) EXPECT(back == stored);
                ran("kv_store");

                const Floats q = rng.normal(static_cast<size_t>(T * ldq));
                Floats out(static_cast<size_t>(T * d.n_head * d.head_dim_v)), out1(out.size());
                const Tensor qt = Tensor::f32(q.data(), ldq, T);
                be.ops->attention(s.batch, 0, d, qt, stride, gated, Tensor::f32(out.data(), d.n_head * d.head_dim_v, T));
                be.ops1->attention(s.batch, 0, d, qt, stride, gated, Tensor::f32(out1.data(), d.n_head * d.head_dim_v, T));
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t) {
                    const SeqState& st = t < 3 ? s.a : s.b;
                    const int64_t n_pos = (t < 3 ? 4 + t : t - 3) + 1;
                    for (int64_t h = 0; h < d.n_head; ++h) {
                        const float* qh = q.data() + t * ldq + h * stride;
                        const ref::Vec o = ref::attend(qh, d.head_dim, d.head_dim_v, *st.kv, 0,
                                                       h / (d.n_head / d.n_head_kv), n_pos);
                        for (int64_t i = 0; i < d.head_dim_v; ++i)
                            want.push_back(o[i] * (gated ? ref::sigmoid(qh[d.head_dim + i]) : 1.0));
                    }
                }
                INFO(type_info(cache).name << (gated ? " gated" : ""));
                close(out, want, 1e-4, 1e-5);
                EXPECT(out == out1);
                ran("attention");
            }
    }

    GdnDims gdn_dims() {
        GdnDims d;
        d.nk = 2, d.nv = 4, d.dk = 16, d.dv = 8, d.conv_k = 4;
        return d;
    }

    void gdn() {
        const GdnDims d = gdn_dims();
        const int64_t nv = d.nv, r = d.nv / d.nk, cd = d.conv_dim();
        for (int64_t T : {1, 6}) {
            const Floats ba = rng.normal(static_cast<size_t>(T * 2 * nv), 2.0f);
            const Floats a = rng.uniform(static_cast<size_t>(nv), -2.0f, -0.1f), dt = rng.normal(static_cast<size_t>(nv));
            Floats beta(static_cast<size_t>(T * nv)), g(beta.size());
            be.ops->gdn_gates(d, Tensor::f32(ba.data(), 2 * nv, T), a.data(), dt.data(), Tensor::f32(beta.data(), nv, T),
                              Tensor::f32(g.data(), nv, T));
            ref::Vec wb, wg;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t h = 0; h < nv; ++h) {
                    const int64_t grp = h / r, j = h % r;
                    wb.push_back(ref::sigmoid(ba[t * 2 * nv + grp * 2 * r + j]));
                    wg.push_back(a[h] * ref::softplus(double(ba[t * 2 * nv + grp * 2 * r + r + j]) + dt[h]));
                }
            close(beta, wb, 1e-6, 1e-7);
            close(g, wg, 1e-5, 1e-6);
            ran("gdn_gates");

            const int64_t K = d.conv_k;
            const Floats x = rng.normal(static_cast<size_t>(T * cd)), w = rng.normal(static_cast<size_t>(cd * K));
            Floats state = rng.normal(static_cast<size_t>((K - 1) * cd)), u(static_cast<size_t>(T * cd));
            Floats hist = state;
            hist.insert(hist.end(), x.begin(), x.end());
            be.ops->conv1d_silu(d, Tensor::f32(x.data(), cd, T), w.data(), state.data(), Tensor::f32(u.data(), cd, T));
            ref::Vec want;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t c = 0; c < cd; ++c) {
                    double sum = 0;
                    for (int64_t j = 0; j < K; ++j) sum += double(w[c * K + j]) * hist[(t + j) * cd + c];
                    want.push_back(ref::silu(sum));
                }
            close(u, want, 1e-5, 1e-6);
            EXPECT(std::equal(state.begin(), state.end(), hist.end() - (K - 1) * cd));  // the last K-1 rows
            ran("conv1d_silu");
        }
        for (int64_t T : {1, 5, 40}) {
            // Prepared rows as the model makes them: q and k L2-normed (q scaled), decays < 1.
            Floats u = rng.normal(static_cast<size_t>(T * cd));
            be.ops->l2_norm(Tensor::f32(u.data(), cd, T), 0, d.nk, d.dk, 1e-6f, 0.25f);
            be.ops->l2_norm(Tensor::f32(u.data(), cd, T), d.key_dim(), d.nk, d.dk, 1e-6f, 1.0f);
            const Floats g = rng.uniform(static_cast<size_t>(T * d.nv), -0.3f, 0.0f);
            const Floats beta = rng.uniform(g.size(), 0.0f, 1.0f);
            const Floats s0 = rng.normal(static_cast<size_t>(d.nv * d.dv * d.dk), 0.5f);
            std::vector<double> S(s0.begin(), s0.end());
            ref::Vec want;
            ref::delta_rule(d, u.data(), g.data(), beta.data(), T, S, want);
            const Tensor ut = Tensor::f32(u.data(), cd, T), gt = Tensor::f32(g.data(), d.nv, T),
                         bt = Tensor::f32(beta.data(), d.nv, T);
            Floats s_rec = s0, s_rec1 = s0, o_rec(static_cast<size_t>(T * d.value_dim())), o_rec1(o_rec.size());
            be.ops->gdn_recurrent(d, ut, gt, bt, s_rec.data(), Tensor::f32(o_rec.data(), d.value_dim(), T));
            be.ops1->gdn_recurrent(d, ut, gt, bt, s_rec1.data(), Tensor::f32(o_rec1.data(), d.value_dim(), T));
            close(o_rec, want, 1e-4, 1e-5);
            close(s_rec, ref::Vec(S.begin(), S.end()), 1e-4, 1e-5);
            EXPECT(o_rec == o_rec1);
            EXPECT(s_rec == s_rec1);
            ran("gdn_recurrent");
            for (int64_t chunk : {4, 16}) {
                Floats s_chk = s0, o_chk(o_rec.size());
                be.ops->gdn_chunked(d, ut, gt, bt, s_chk.data(), Tensor::f32(o_chk.data(), d.value_dim(), T), chunk);
                close(o_chk, want, 1e-4, 2e-5);
                close(s_chk, ref::Vec(S.begin(), S.end()), 1e-4, 2e-5);
                ran("gdn_chunked");
            }
        }
    }

    void moe() {
        for (int64_t T : {1, 7}) {
            const int64_t X = 8, k = 3, E = 64, F = 32;
            Floats logits = rng.normal(static_cast<size_t>(T * X), 2.0f);
            const Floats raw = logits;
            std::vector<int32_t> ids(static_cast<size_t>(T * k));
            Floats wt(ids.size());
            be.ops->topk_softmax(Tensor::f32(logits.data(), X, T), k, ids.data(), wt.data());
            ref::Vec want_wt;
            for (int64_t t = 0; t < T; ++t) {
                ref::Vec p(static_cast<size_t>(X));
                double mx = -1e300, sum = 0;
                for (int64_t e = 0; e < X; ++e) mx = std::max(mx, double(raw[t * X + e]));
                for (int64_t e = 0; e < X; ++e) sum += (p[e] = std::exp(raw[t * X + e] - mx));
                std::vector<int32_t> order(static_cast<size_t>(X));
                for (int32_t e = 0; e < X; ++e) order[e] = e;
                std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
                double top = 0;
                for (int64_t s = 0; s < k; ++s) top += p[order[s]] / sum;
                for (int64_t s = 0; s < k; ++s) {
                    EXPECT(ids[t * k + s] == order[s]);
                    want_wt.push_back(p[order[s]] / sum / top);
                }
            }
            close(wt, want_wt, 1e-5, 1e-7);
            ran("topk_softmax");

            std::vector<Weight> gate, up, down;
            std::vector<MatView> gv, uv, dv;
            for (int64_t e = 0; e < X; ++e) {
                gate.push_back(make_weight(rng, GgmlType::Q8_0, E, F));
                up.push_back(make_weight(rng, GgmlType::Q8_0, E, F));
                down.push_back(make_weight(rng, GgmlType::Q8_0, F, E));
            }
            for (int64_t e = 0; e < X; ++e) gv.push_back(gate[e].view), uv.push_back(up[e].view), dv.push_back(down[e].view);
            const Floats h = rng.normal(static_cast<size_t>(T * E));
            Floats routed(static_cast<size_t>(T * k * E)), routed1(routed.size());
            be.ops->moe_experts(gv, uv, dv, ids.data(), k, Tensor::f32(h.data(), E, T), Tensor::f32(routed.data(), E, T * k));
            be.ops1->moe_experts(gv, uv, dv, ids.data(), k, Tensor::f32(h.data(), E, T), Tensor::f32(routed1.data(), E, T * k));
            ref::Vec want, mag;
            for (int64_t i = 0; i < T * k; ++i) {
                const int32_t e = ids[i];
                const float* ht = h.data() + (i / k) * E;
                const ref::Vec gg = ref::matmul(gv[e], ht, 1), uu = ref::matmul(uv[e], ht, 1);
                Floats act(static_cast<size_t>(F));
                for (int64_t j = 0; j < F; ++j) act[j] = static_cast<float>(ref::silu(gg[j]) * uu[j]);
                ref::Vec m;
                const ref::Vec y = ref::matmul(dv[e], act.data(), 1, &m);
                want.insert(want.end(), y.begin(), y.end());
                mag.insert(mag.end(), m.begin(), m.end());
            }
            close(routed, want, 3e-2, 1e-3, &mag);  // two quantized products in a row
            EXPECT(routed == routed1);
            ran("moe_experts");

            const Floats shared = rng.normal(static_cast<size_t>(T * E)), sg = rng.normal(static_cast<size_t>(E), 0.1f);
            Floats out(static_cast<size_t>(T * E));
            be.ops->moe_combine(Tensor::f32(routed.data(), E, T * k), wt.data(), k, Tensor::f32(shared.data(), E, T),
                                sg.data(), Tensor::f32(h.data(), E, T), Tensor::f32(out.data(), E, T));
            ref::Vec comb;
            for (int64_t t = 0; t < T; ++t) {
                double dot = 0;
                for (int64_t i = 0; i < E; ++i) dot += double(sg[i]) * h[t * E + i];
                for (int64_t i = 0; i < E; ++i) {
                    double y = 0;
                    for (int64_t s = 0; s < k; ++s) y += double(wt[t * k + s]) * routed[(t * k + s) * E + i];
                    comb.push_back(y + ref::sigmoid(dot) * shared[t * E + i]);
                }
            }
            close(out, comb, 1e-5, 1e-5);
            ran("moe_combine");
        }
    }

    // The hand-off ops on a CPU device's host-mapped memory: the payload crosses exactly,
    // a wait for a window never published times out, a dropped flag is never seen, an
    // abort releases the waiter, and a publish from another device's queue wakes it.
    void handoff() {
        std::unique_ptr<Device> dev = open_device("cpu:0", 1, 0);
        for (int64_t T : {1, 5}) {
            const int64_t E = 24;
            Handoff h(*dev, static_cast<size_t>(8 * E));
            const Floats x = rng.normal(static_cast<size_t>(T * (E + 3)));
            const Tensor xs = Tensor::f32(x.data() + 1, E, T, E + 3);  // strided rows
            be.ops->handoff_publish(xs, h, 7, false);
            EXPECT(h.ready() == 7);
            ran("handoff_publish");
            Floats got(static_cast<size_t>(T * E), -1.0f);
            const std::optional<Tensor> in = be.ops->handoff_wait(h, 7, 1000, Tensor::f32(got.data(), E, T));
            EXPECT((in && in->ne0 == E && in->ne1 == T && in->contiguous()));
            // The rows to run on: the payload in place, or got after a copy (the backend's choice).
            if (in) EXPECT((in->data == h.payload() || in->data == got.data()));
            if (in) std::memcpy(got.data(), in->data, got.size() * sizeof(float));
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < E; ++i) EXPECT(got[t * E + i] == x[t * (E + 3) + 1 + i]);
            ran("handoff_wait");
            // Publishing the payload itself (a stage that ran in place): no copy, the word raised.
            if (in && in->data == h.payload()) {
                be.ops->handoff_publish(*in, h, 8, false);
                EXPECT(h.ready() == 8);
                const std::optional<Tensor> again = be.ops->handoff_wait(h, 8, 1000, Tensor::f32(got.data(), E, T));
                EXPECT((again && std::memcmp(again->data, got.data(), got.size() * sizeof(float)) == 0));
                ran("handoff_publish");
                h.reset();
            }

            Floats untouched(got.size(), -1.0f);
            EXPECT(!be.ops->handoff_wait(h, 12, 20, Tensor::f32(untouched.data(), E, T)));  // window 12: never
            EXPECT(h.failure() == Handoff::Wait::TimedOut);
            EXPECT(h.error() == Handoff::kTimeout);
            EXPECT(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == -1.0f; }));
            ran("handoff_wait");

            h.reset();
            be.ops->handoff_publish(xs, h, 9, /*drop=*/true);
            EXPECT(!be.ops->handoff_wait(h, 9, 20, Tensor::f32(untouched.data(), E, T)));
            ran("handoff_publish");

            h.reset();
            h.abort();
            EXPECT(!be.ops->handoff_wait(h, 10, 0, Tensor::f32(untouched.data(), E, T)));  // no limit: the abort ends it
            EXPECT(h.failure() == Handoff::Wait::Aborted);
            ran("handoff_wait");

            h.reset();
            Ops& ops = *be.ops;
            dev->submit([&] { ops.handoff_publish(xs, h, 11, false); });
            const DeviceEvent ev = dev->record();
            Floats other(got.size(), 0.0f);
            const std::optional<Tensor> in11 = be.ops->handoff_wait(h, 11, 5000, Tensor::f32(other.data(), E, T));
            EXPECT(in11.has_value());
            EXPECT(ev.wait(5000));
            if (in11) EXPECT(std::memcmp(in11->data, got.data(), got.size() * sizeof(float)) == 0);
            ran("handoff_wait");
        }
    }
};

}  // namespace

TEST_CASE("ops: every op on every backend agrees with its reference", "[ops]") {
    std::vector<Backend> bes = backends();
    std::set<std::string> ops;
    int64_t cases = 0;
    for (Backend& be : bes) {
        INFO("backend " << be.name);
        Harness h{be, Rng{7}, {}, 0};
        h.get_rows();
        h.norms();
        h.elementwise();
        h.matmuls();
        h.attention();
        h.gdn();
        h.moe();
        h.handoff();
        ops.insert(h.ops_seen.begin(), h.ops_seen.end());
        cases += h.cases;
    }
    CHECK(ops.size() == 26);  // every op of engine/backend/ops.h, memory and host copies included
    if (g_failed == 0)
        std::printf("ops: %zu ops x %zu backends, %lld cases passed\n", ops.size(), bes.size(),
                    static_cast<long long>(cases));
    else
        std::printf("ops: %zu ops x %zu backends, %lld cases, %lld failed checks\n", ops.size(), bes.size(),
                    static_cast<long long>(cases), static_cast<long long>(g_failed));
}
