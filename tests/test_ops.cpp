// The every-op, every-backend harness (in the spirit of ggml's test-backend-ops): each op
// of engine/backend/ops.h on each backend present, on random shapes (odd sizes, one row,
// many rows, every weight type the op reads), against the plain references of
// tests/ops_reference.h, within the tolerance the op states, and bit for bit across
// thread counts where its canonical order promises that. Every pointer an op takes is
// memory of the backend's device (Ops::alloc): inputs go in with to_device, results come
// back with to_host (which returns when they are there), and the references and the
// comparisons read those host copies. The backends: the CPU, the CPU staging its copies
// as a GPU must, and the GPU this build has when a device is present. Closes with
// "ops: N ops x M backends, K cases passed".
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "engine/backend/device.h"
#include "engine/backend/handoff.h"
#include "engine/quant/types.h"
#include "tests/ops_reference.h"

using namespace strata;

namespace {

// A backend under test: a device, and a second instance of the same kind (on the CPU,
// another thread count: the op's result must not depend on it where the op says so).
struct Backend {
    std::string name;
    std::unique_ptr<Device> dev, dev1;
    Ops& ops() { return dev->ops(); }
    Ops& ops1() { return dev1->ops(); }
};

std::vector<Backend> backends() {
    std::vector<Backend> out;
    out.push_back({"cpu", open_device("cpu:0", 3, -1), open_device("cpu:0", 1, -1)});
    // Host memory still, but every op's memory treated as the device's own (host_memory()
    // false): the path a GPU takes, on the CPU.
    out.push_back({"cpu-staged", open_device("cpu:0", 3, -1, /*staged_copies=*/true),
                   open_device("cpu:0", 1, -1, /*staged_copies=*/true)});
    if (!gpu_backend().empty() && gpu_device_count() > 0) {
        const std::string spec = std::string(gpu_backend()) + ":0";
        out.push_back({spec, open_device(spec, 1, -1), open_device(spec, 1, -1)});
    }
    return out;
}

using Floats = std::vector<float>;
using Ids = std::vector<int32_t>;

// Memory of one backend's device for a case: host data copied in (to_device), results
// read back (to_host), every buffer freed with the helper.
struct Dev {
    Ops& ops;
    std::vector<Buffer> keep;

    explicit Dev(Ops& o) : ops(o) {}

    void* alloc(size_t bytes) {
        keep.push_back(ops.alloc(bytes));  // zeroed
        return keep.back().data();
    }
    float* zeros(size_t n) { return static_cast<float*>(alloc(n * sizeof(float))); }
    Tensor zeros(int64_t n, int64_t rows) { return Tensor::f32(zeros(static_cast<size_t>(n * rows)), n, rows); }
    float* in(const Floats& h) {
        float* p = zeros(h.size());
        ops.to_device(p, h.data(), h.size() * sizeof(float));
        return p;
    }
    // h as rows x n values, row r at r * ld (ld = n when 0): the whole of h goes in.
    Tensor in(const Floats& h, int64_t n, int64_t rows, int64_t ld = 0) { return Tensor::f32(in(h), n, rows, ld); }
    int32_t* in_ids(const Ids& h) {
        auto* p = static_cast<int32_t*>(alloc(h.size() * sizeof(int32_t)));
        ops.to_device(p, h.data(), h.size() * sizeof(int32_t));
        return p;
    }
    int32_t* ids(size_t n) { return static_cast<int32_t*>(alloc(n * sizeof(int32_t))); }

    Floats out(const float* p, size_t n) {
        Floats h(n);
        ops.to_host(h.data(), p, n * sizeof(float));
        return h;
    }
    // t's rows, ne0 values each, packed.
    Floats out(const Tensor& t) {
        Floats h(static_cast<size_t>(t.ne0 * t.ne1));
        if (t.contiguous())
            ops.to_host(h.data(), t.data, h.size() * sizeof(float));
        else
            for (int64_t r = 0; r < t.ne1; ++r)
                ops.to_host(h.data() + r * t.ne0, t.row(r), sizeof(float) * static_cast<size_t>(t.ne0));
        return h;
    }
    Ids out_ids(const int32_t* p, size_t n) {
        Ids h(n);
        ops.to_host(h.data(), p, n * sizeof(int32_t));
        return h;
    }
    // Layer l of a KV cache of this device (n_head_kv heads), copied back for ref::attend.
    ref::KvHost kv(const KvCache& kv, int64_t l, int64_t n_head_kv) {
        ref::KvHost h;
        h.type = kv.type(), h.n_ctx = kv.n_ctx(), h.k_stride = kv.k_stride(), h.v_stride = kv.v_stride();
        const size_t kh = static_cast<size_t>(h.n_ctx) * h.k_stride, vh = static_cast<size_t>(h.n_ctx) * h.v_stride;
        h.k.resize(kh * static_cast<size_t>(n_head_kv));
        h.v.resize(vh * static_cast<size_t>(n_head_kv));
        for (int64_t i = 0; i < n_head_kv; ++i) {
            ops.to_host(h.k.data() + kh * static_cast<size_t>(i), kv.k_head(l, i), kh);
            ops.to_host(h.v.data() + vh * static_cast<size_t>(i), kv.v_head(l, i), vh);
        }
        return h;
    }
};

// The ready word once the device has run what was queued before (a GPU raises it from a
// kernel, some time after the publishing call returns; the CPU, before it returns).
uint64_t ready_word(const Handoff& h, uint64_t want) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (h.ready() != want && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return h.ready();
}

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
    // Every weight made, alive as long as the backend: a prepared weight (prepare_weight,
    // prepare_table) is valid as long as its Ops, and a backend may know it by its address.
    std::deque<Weight> weights;

    explicit Harness(Backend& b) : be(b) {}

    void ran(const char* op) {
        ops_seen.insert(op);
        ++cases;
    }

    const Weight& weight(GgmlType type, int64_t n_in, int64_t n_out) {
        weights.push_back(make_weight(rng, type, n_in, n_out));
        return weights.back();
    }

    void get_rows() {
        Ops& ops = be.ops();
        for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K})
            for (int64_t T : {1, 5}) {
                Dev d{ops};
                const Weight& tab = weight(type, 256, 40);
                const Ids ids = {0, 39, 7, 7, 21};
                const Tensor x = d.zeros(256, T);
                const MatView table = ops.prepare_table(tab.view);
                ran("prepare_table");
                ops.get_rows(table, d.in_ids(ids), x);
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t)
                    for (double v : ref::dequant(tab.view, ids[t])) want.push_back(v);
                close(d.out(x), want, 0, 0);
                // The bad id through device memory too; the error may come with the op or
                // with the copy that waits for it.
                const int32_t* bad = d.in_ids({40});
                const auto bad_row = [&] {
                    ops.get_rows(table, bad, x.rows(0, 1));
                    d.out(x.rows(0, 1));
                };
                CHECK_THROWS_WITH(bad_row(), Catch::Contains("token id 40 is out of range"));
                ran("get_rows");
            }
    }

    void norms() {
        Ops& ops = be.ops();
        for (int64_t n : {1, 7, 96, 257})
            for (int64_t T : {1, 3}) {
                const Floats x = rng.normal(static_cast<size_t>(n * T)), w = rng.normal(static_cast<size_t>(n));
                for (bool with_w : {true, false}) {
                    Dev d{ops};
                    const float* wd = with_w ? d.in(w) : nullptr;
                    const Tensor yt = d.zeros(n, T);
                    ops.rms_norm(d.in(x, n, T), wd, 1e-6f, yt);
                    const Floats y = d.out(yt);
                    ref::Vec want;
                    for (int64_t t = 0; t < T; ++t)
                        for (double v : ref::rms_norm(x.data() + t * n, n, with_w ? w.data() : nullptr, 1e-6))
                            want.push_back(v);
                    close(y, want, 2e-6, 1e-6);
                    const Tensor t = d.in(x, n, T);  // y may be x
                    ops.rms_norm(t, wd, 1e-6f, t);
                    const Floats inplace = d.out(t);
                    EXPECT(inplace == y);
                    ran("rms_norm");
                }
            }
        for (int64_t head : {8, 24})
            for (int64_t T : {1, 4}) {
                const int64_t n = 3 * head;
                const Floats x = rng.normal(static_cast<size_t>(n * T));
                const Floats z = rng.normal(x.size()), w = rng.normal(static_cast<size_t>(head));
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t h = 0; h < 3; ++h) {
                        const ref::Vec r = ref::rms_norm(x.data() + t * n + h * head, head, w.data(), 1e-6);
                        for (int64_t j = 0; j < head; ++j) want.push_back(r[j] * ref::silu(z[t * n + h * head + j]));
                    }
                Dev d{ops};
                const Tensor xt = d.in(x, n, T);
                ops.rms_norm_gated(xt, d.in(z, n, T), d.in(w), head, 1e-6f);
                close(d.out(xt), want, 1e-5, 1e-6);
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
                Dev d{ops};
                const Tensor xt = d.in(x, n, T);
                ops.l2_norm(xt, col0, 3, head, 1e-6f, scale);
                close(d.out(xt), want, 2e-6, 1e-7);
                ran("l2_norm");
            }
    }

    void elementwise() {
        Ops &ops = be.ops(), &ops1 = be.ops1();
        for (int64_t n : {1, 5, 1000, 4099}) {
            Dev d{ops}, d1{ops1};
            const Floats g = rng.normal(static_cast<size_t>(n), 3.0f), u = rng.normal(static_cast<size_t>(n));
            const Tensor yt = d.zeros(n, 1), y1t = d1.zeros(n, 1);
            ops.swiglu(d.in(g, n, 1), d.in(u, n, 1), yt);
            ops1.swiglu(d1.in(g, n, 1), d1.in(u, n, 1), y1t);
            const Floats y = d.out(yt), y1 = d1.out(y1t);
            ref::Vec want;
            for (int64_t i = 0; i < n; ++i) want.push_back(ref::silu(g[i]) * u[i]);
            close(y, want, 1e-5, 1e-6);
            EXPECT(y == y1);  // elementwise: the split across threads changes nothing
            ran("swiglu");

            const Floats a = rng.normal(static_cast<size_t>(n));
            const Floats b = rng.normal(static_cast<size_t>(n));
            ref::Vec sum;
            for (int64_t i = 0; i < n; ++i) sum.push_back(double(a[i] + b[i]));  // f32 adds, exactly
            const Tensor at = d.in(a, n, 1);
            ops.add(at, d.in(b, n, 1));
            close(d.out(at), sum, 0, 0);
            ran("add");
        }
        Dev d{ops};
        // Strided rows: copy and add on column ranges of wider rows.
        const Floats src = rng.normal(7 * 10);
        float* srcd = d.in(src);
        float* dstd = d.zeros(7 * 6);
        ops.copy(Tensor::f32(dstd + 1, 4, 7, 6), Tensor::f32(srcd + 3, 4, 7, 10));
        const Floats dst = d.out(dstd, 7 * 6);
        for (int64_t r = 0; r < 7; ++r)
            for (int64_t c = 0; c < 6; ++c)
                EXPECT(dst[r * 6 + c] == (c >= 1 && c < 5 ? src[r * 10 + 3 + c - 1] : 0.0f));
        ran("copy");
        // A copy of megabytes (a snapshot of a recurrent state), which the CPU spreads over its pool.
        {
            Dev db{ops};
            const Floats big = rng.normal(3001 * 130);
            const Tensor big_out = db.zeros(130, 3001);
            ops.copy(big_out, db.in(big, 130, 3001));
            EXPECT((db.out(big_out) == big));
            ran("copy");
            // zero: the same megabytes cleared (a recurrent state reset in place), then
            // strided rows, whose other columns keep their values.
            ops.zero(big_out);
            EXPECT((db.out(big_out) == Floats(big.size(), 0.0f)));
            float* wide = db.in(src);
            ops.zero(Tensor::f32(wide + 2, 5, 7, 10));
            const Floats z = db.out(wide, 7 * 10);
            for (int64_t r = 0; r < 7; ++r)
                for (int64_t c = 0; c < 10; ++c)
                    EXPECT(z[r * 10 + c] == (c >= 2 && c < 7 ? 0.0f : src[r * 10 + c]));
            ran("zero");
        }

        // Memory: zeroed and aligned, host copies in and out exact, a prepared vector the same values.
        for (size_t bytes : {size_t{4}, size_t{1000}, size_t{3} << 20}) {
            const Buffer b = ops.alloc(bytes);
            EXPECT(b.size() == bytes);
            EXPECT(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
            std::vector<uint8_t> back(bytes, 1);
            ops.to_host(back.data(), b.data(), bytes);
            EXPECT(std::all_of(back.begin(), back.end(), [](uint8_t v) { return v == 0; }));
            ran("alloc");
            std::vector<uint8_t> pattern(bytes);
            for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
            ops.to_device(b.data(), pattern.data(), bytes);
            ops.to_host(back.data(), b.data(), bytes);
            EXPECT((back == pattern));
            ran("to_device");
            ran("to_host");
        }
        const Floats v = rng.normal(37);
        const float* pv = ops.prepare_vector(v);
        Floats pv_back(v.size());
        ops.to_host(pv_back.data(), pv, v.size() * sizeof(float));
        EXPECT((pv_back == v));
        ran("prepare_vector");
        const Tensor yt = d.in(dst, 6, 7);
        ops.add(yt, Tensor::f32(srcd, 6, 7, 10));
        const Floats y = d.out(yt);
        for (int64_t r = 0; r < 7; ++r)
            for (int64_t c = 0; c < 6; ++c) EXPECT(y[r * 6 + c] == dst[r * 6 + c] + src[r * 10 + c]);
        ran("add");
    }

    // An integer product of what a norm or SwiGLU just wrote (a GPU backend quantizes it in
    // the producer's kernel, GpuOps::fused_) gives the bytes of the same product of those
    // values uploaded afresh; and after an op that changes them (an add, a product into
    // them, an upload), the changed values, never the digits made before.
    void fused_products() {
        Ops& ops = be.ops();
        constexpr int64_t n = 256, n_out = 40, T = 3, head = 64;
        for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K}) {
            INFO(type_info(type).name);
            Dev d{ops};
            const MatView w = ops.prepare_weight(weight(type, n, n_out).view);
            const MatView sq = ops.prepare_weight(weight(type, n, n).view);
            const Floats x = rng.normal(static_cast<size_t>(n * T)), nw = rng.normal(static_cast<size_t>(n));
            const float* nwd = d.in(nw);
            // The product of what y holds now, through a fresh copy of it.
            const auto fresh = [&](const Tensor& y) {
                const Tensor out = d.zeros(n_out, y.ne1);
                ops.matmul(w, d.in(d.out(y), y.ne0, y.ne1), out);
                return d.out(out);
            };
            const auto product = [&](const Tensor& y) {
                const Tensor out = d.zeros(n_out, y.ne1);
                ops.matmul(w, y, out);
                return d.out(out);
            };
            const Tensor y = d.zeros(n, T);
            ops.rms_norm(d.in(x, n, T), nwd, 1e-6f, y);
            EXPECT(product(y) == fresh(y));
            ops.rms_norm(d.in(x, n, T), nwd, 1e-6f, y);
            EXPECT(product(y.rows(T - 1, 1)) == fresh(y.rows(T - 1, 1)));  // a window's last row
            ops.rms_norm(d.in(x, n, T), nwd, 1e-6f, y);
            ops.add(y, d.in(rng.normal(static_cast<size_t>(n * T)), n, T));
            EXPECT(product(y) == fresh(y));
            // A residual add and the norm of its sum (a GPU backend: one kernel): the sum and
            // the norm are the plain ops' bytes, and so is the product of the norm.
            const Floats r = rng.normal(static_cast<size_t>(n * T)), a = rng.normal(static_cast<size_t>(n * T));
            const Tensor res = d.in(r, n, T), res2 = d.in(r, n, T), y2 = d.zeros(n, T);
            ops.add(res, d.in(a, n, T));
            ops.rms_norm(res, nwd, 1e-6f, y);
            const Floats sum = d.out(res), normed = d.out(y);
            ops.add(res2, d.in(a, n, T));
            const Floats sum2 = d.out(res2);  // the add alone, issued before the copy
            ops.rms_norm(res2, nwd, 1e-6f, y2);
            EXPECT(sum == sum2);
            EXPECT(normed == d.out(y2));
            ops.add(res, d.in(a, n, T));
            ops.rms_norm(res, nwd, 1e-6f, y);
            EXPECT(product(y) == fresh(y));
            {
                // A decode step's out projection, the residual add of its output and the next
                // norm (a GPU backend holds the product and the add and runs the three in one
                // kernel), against the ops with each result brought to the host in between;
                // chained 2: the product and the add held, then issued by a copy out.
                const Floats x1 = rng.normal(static_cast<size_t>(n)), r1 = rng.normal(static_cast<size_t>(n));
                std::vector<Floats> got[3];
                for (int chained = 0; chained < 3; ++chained) {
                    const Tensor xin = d.in(x1, n, 1), res1 = d.in(r1, n, 1), o = d.zeros(n, 1), y1 = d.zeros(n, 1);
                    ops.matmul(sq, xin, o);
                    if (!chained) (void)d.out(o);
                    ops.add(res1, o);
                    if (chained != 1) (void)d.out(res1);
                    ops.rms_norm(res1, nwd, 1e-6f, y1);
                    got[chained] = {d.out(o), d.out(res1), d.out(y1), product(y1)};
                }
                for (size_t i = 0; i < got[0].size(); ++i) {
                    INFO("output " << i << " of the product, the residual, the norm, the product of the norm");
                    EXPECT(got[1][i] == got[0][i]);
                    EXPECT(got[2][i] == got[0][i]);
                }
            }
            ops.rms_norm(d.in(x, n, T), nwd, 1e-6f, y);
            ops.matmul(sq, d.in(x, n, T), y);  // a product into y
            EXPECT(product(y) == fresh(y));
            ops.rms_norm(d.in(x, n, T), nwd, 1e-6f, y);
            const Floats up = rng.normal(static_cast<size_t>(n * T));
            ops.to_device(y.data, up.data(), up.size() * sizeof(float));
            EXPECT(product(y) == fresh(y));
            // SwiGLU into its gate rows (as the experts' is), the gated norm in place.
            const Tensor g = d.in(rng.normal(static_cast<size_t>(n * T)), n, T);
            ops.swiglu(g, d.in(rng.normal(static_cast<size_t>(n * T)), n, T), g);
            EXPECT(product(g) == fresh(g));
            const Tensor xg = d.in(x, n, T);
            ops.rms_norm_gated(xg, d.in(rng.normal(static_cast<size_t>(n * T)), n, T), d.in(rng.normal(head)), head,
                               1e-6f);
            EXPECT(product(xg) == fresh(xg));
            ran("matmul");
        }
    }

    void matmuls() {
        Ops &ops = be.ops(), &ops1 = be.ops1();
        for (GgmlType type : supported_types()) {
            const int64_t bs = type_info(type).block_size;
            const int64_t n_in = bs >= 256 ? 512 : 256 + bs;  // odd block counts where the type allows
            for (int64_t n_out : {1, 33})
                for (int64_t T : {1, 6}) {
                    Dev d{ops}, d1{ops1};
                    const Weight& w = weight(type, n_in, n_out);
                    const MatView wd = ops.prepare_weight(w.view), wd1 = ops1.prepare_weight(w.view);
                    const Floats x = rng.normal(static_cast<size_t>(T * n_in));
                    const Tensor xt = d.in(x, n_in, T), yt = d.zeros(n_out, T), y1t = d1.zeros(n_out, T);
                    ops.matmul(wd, xt, yt);
                    ops1.matmul(wd1, d1.in(x, n_in, T), y1t);
                    const Floats y = d.out(yt), y1 = d1.out(y1t);
                    ref::Vec mag;
                    const ref::Vec want = ref::matmul(w.view, x.data(), T, &mag);
                    INFO(type_info(type).name << " n_out " << n_out << " T " << T);
                    // f32 sums; the integer path quantizes each row of x to 8 bits (|error| < 1/127
                    // of each |w x| term, in practice far less).
                    const bool float_w = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
                    close(y, want, float_w ? 1e-5 : 1e-2, 1e-5, &mag);
                    EXPECT(y == y1);
                    // One row of a many-row call is that row alone: batch invariance.
                    const Tensor solo_t = d.zeros(n_out, 1);
                    ops.matmul(wd, xt.rows(T - 1, 1), solo_t);
                    const Floats solo = d.out(solo_t);
                    EXPECT(std::equal(solo.begin(), solo.end(), y.begin() + (T - 1) * n_out));
                    ran("matmul");
                }
        }
        // Six weights, five of one type around one of another: a GPU backend launches the
        // integer ones in groups of one type (at most gpu::kMultiMax per launch); each
        // output is still exactly its own matmul, in decode, verify and prompt windows.
        for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16})
            for (int64_t T : {1, 3, 20}) {
                INFO(type_info(type).name << " T " << T);
                Dev d{ops};
                constexpr int64_t n_in = 256;
                const int64_t n_out[6] = {17, 5, 40, 8, 3, 9};
                const GgmlType other = type == GgmlType::Q8_0 ? GgmlType::Q6_K : GgmlType::Q8_0;
                const Tensor xt = d.in(rng.normal(static_cast<size_t>(T * n_in)), n_in, T);
                std::vector<MatOut> outs;
                std::vector<Tensor> ys, refs;
                for (size_t i = 0; i < 6; ++i) {
                    const MatView v = ops.prepare_weight(weight(i == 2 ? other : type, n_in, n_out[i]).view);
                    ys.push_back(d.zeros(n_out[i], T));
                    refs.push_back(d.zeros(n_out[i], T));
                    outs.push_back({v, ys.back().f(), n_out[i]});
                }
                ops.matmul_multi(outs, xt);
                for (size_t i = 0; i < 6; ++i) {
                    INFO("weight " << i);
                    ops.matmul(outs[i].w, xt, refs[i]);
                    EXPECT(d.out(ys[i]) == d.out(refs[i]));  // exactly one matmul per weight
                }
                ran("matmul_multi");
            }
    }

    // Two sequences in one batch (3 rows at position 4.., 2 rows at 0..), each with a cache
    // in the backend's memory.
    struct Seqs {
        SeqState a, b;
        Batch batch;
    };
    Seqs seqs(GgmlType cache, int64_t n_head_kv, int64_t hd, int64_t hdv, int64_t hist = 4) {
        Seqs s;
        for (SeqState* st : {&s.a, &s.b}) {
            st->n_ctx = hist + 12;
            st->kv = std::make_unique<KvCache>(be.ops().allocator(), 1, hist + 12, n_head_kv, hd, hdv, cache);
            st->kv_slot = {0};
        }
        s.batch.add(s.a, hist, 3);
        s.batch.add(s.b, 0, 2);
        return s;
    }

    void attention() {
        Ops &ops = be.ops(), &ops1 = be.ops1();
        for (bool neox : {false, true})
            for (bool norm : {false, true})
            for (int scaling : {0, 1, 2}) {  // plain; a file's rope_freqs (llama 3.1+); both and YaRN
                const bool scaled = scaling > 0, yarn = scaling == 2;
                const int64_t hd = 32, n_heads = 3, stride = 2 * hd, T = 5;
                Seqs s = seqs(GgmlType::F16, 1, hd, hd);
                const Floats x = rng.normal(static_cast<size_t>(T * n_heads * stride));
                const Floats w = rng.normal(static_cast<size_t>(hd));
                const Floats ff = rng.uniform(static_cast<size_t>((hd - 8) / 2), 1.0f, 8.0f);
                const float* ffh = scaled ? ff.data() : nullptr;
                ref::Vec want(x.begin(), x.end());
                Dev d{ops}, d1{ops1};
                RopeParams rp{hd - 8, neox, 10000.0f, 0.5f, scaled ? d.in(ff) : nullptr};
                if (yarn) rp.ext_factor = 1.0f, rp.corr_low = 2.0f, rp.corr_high = 7.0f, rp.mscale = 1.07f;
                RopeParams rp1 = rp;
                rp1.freq_factors = scaled ? d1.in(ff) : nullptr;
                for (int64_t t = 0; t < T; ++t) {
                    const int64_t pos = t < 3 ? 4 + t : t - 3;
                    for (int64_t h = 0; h < n_heads; ++h) {
                        double* v = want.data() + t * n_heads * stride + h * stride;
                        if (norm) {
                            const ref::Vec r = ref::rms_norm(x.data() + (v - want.data()), hd, w.data(), 1e-6);
                            std::copy(r.begin(), r.end(), v);
                        }
                        ref::rope(v, rp.n_rot, neox, pos, rp.freq_base, rp.freq_scale, ffh, rp.ext_factor, rp.corr_low,
                                  rp.corr_high, rp.mscale);
                    }
                }
                // Two sets in one call (q's 3 heads at stride 2 hd, k's 2 heads packed), and the
                // same sets one call each: the same floats.
                const Floats k = rng.normal(static_cast<size_t>(T * 2 * hd));
                ref::Vec want_k(k.begin(), k.end());
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t h = 0; h < 2; ++h)
                        ref::rope(want_k.data() + t * 2 * hd + h * hd, rp.n_rot, neox, t < 3 ? 4 + t : t - 3,
                                  rp.freq_base, rp.freq_scale, ffh, rp.ext_factor, rp.corr_low, rp.corr_high, rp.mscale);
                const Tensor xt = d.in(x, n_heads * stride, T), kt = d.in(k, 2 * hd, T);
                const RopeHeads both[2] = {{xt, n_heads, stride, norm ? d.in(w) : nullptr}, {kt, 2, hd, nullptr}};
                ops.norm_rope(s.batch, both, hd, 1e-6f, rp);
                const Floats xo = d.out(xt), ko = d.out(kt);
                close(xo, want, 1e-5, 1e-5);
                close(ko, want_k, 1e-5, 1e-5);
                const Tensor x1t = d1.in(x, n_heads * stride, T), k1t = d1.in(k, 2 * hd, T);
                const RopeHeads q_only[1] = {{x1t, n_heads, stride, norm ? d1.in(w) : nullptr}};
                const RopeHeads k_only[1] = {{k1t, 2, hd, nullptr}};
                ops1.norm_rope(s.batch, q_only, hd, 1e-6f, rp1);
                ops1.norm_rope(s.batch, k_only, hd, 1e-6f, rp1);
                EXPECT(d1.out(x1t) == xo);
                EXPECT(d1.out(k1t) == ko);
                ran("norm_rope");
            }
        // hist: positions of sequence a before the window (700: a GPU splits them in parts).
        for (int64_t hist : {4, 700})
        for (GgmlType cache : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0})
            for (bool gated : {false, true}) {
                if (hist > 4 && cache != GgmlType::F16 && cache != GgmlType::Q8_0) continue;
                const AttnDims d{4, 2, 32, 32};
                const int64_t T = 5, stride = gated ? 2 * d.head_dim : d.head_dim, ldq = d.n_head * stride;
                const int64_t n_kv = d.n_head_kv * d.head_dim;
                Seqs s = seqs(cache, d.n_head_kv, d.head_dim, d.head_dim_v, hist);
                Dev dv{ops}, dv1{ops1};
                // History: positions 0..hist-1 of sequence a from earlier windows.
                for (int64_t p = 0; p < hist;) {
                    const int64_t n = p < 2 ? 1 : hist - p;
                    const Floats k = rng.normal(static_cast<size_t>(n * n_kv)),
                                 v = rng.normal(static_cast<size_t>(n * n_kv));
                    ops.kv_store(Batch::single(s.a, p, n), 0, dv.in(k, n_kv, n), dv.in(v, n_kv, n));
                    p += n;
                }
                const Floats k = rng.normal(static_cast<size_t>(T * n_kv)), v = rng.normal(static_cast<size_t>(T * n_kv));
                ops.kv_store(s.batch, 0, dv.in(k, n_kv, T), dv.in(v, n_kv, T));
                std::vector<uint8_t> row(s.b.kv->k_stride());
                ops.to_host(row.data(), s.b.kv->k_head(0, 1) + 1 * s.b.kv->k_stride(), row.size());
                std::vector<float> back(static_cast<size_t>(d.head_dim));
                dequantize_row(cache, row.data(), back.data(), d.head_dim);
                Floats stored(k.begin() + 4 * n_kv + d.head_dim, k.begin() + 5 * n_kv);  // row 4 = b's position 1
                if (cache == GgmlType::F32) EXPECT(back == stored);
                // Quantized caches: within the format's rounding: half a step of the block's
                // scale d (amax / 127 for q8_0, amax / 8 for q4_0), plus the scale's own f16
                // rounding (2^-11 relative) times the largest level (127, 8); f16: 2^-11.
                float amax = 0, worst = 0;
                for (size_t i = 0; i < stored.size(); ++i) {
                    amax = std::max(amax, std::fabs(stored[i]));
                    worst = std::max(worst, std::fabs(back[i] - stored[i]));
                }
                const float step = cache == GgmlType::Q4_0   ? (0.5f + 8.0f / 2048) / 8
                                   : cache == GgmlType::Q8_0 ? (0.5f + 127.0f / 2048) / 127
                                                             : 1.0f / 2048;
                INFO(type_info(cache).name << " store: worst " << worst << " of amax " << amax);
                EXPECT(worst <= amax * step * 1.01f);
                ran("kv_store");
                {
                    // An attention layer's norm and rotation of q and k, then its KV store (a GPU
                    // backend holds the rotation and launches both in one kernel), against the
                    // two with the rotated k brought to the host in between: the same rows, the
                    // same cache bytes.
                    const int64_t hd = d.head_dim;
                    const Floats q0 = rng.normal(static_cast<size_t>(T * ldq)), k0 = rng.normal(static_cast<size_t>(T * n_kv)),
                                 v0 = rng.normal(static_cast<size_t>(T * n_kv)), qn = rng.normal(static_cast<size_t>(hd)),
                                 kn = rng.normal(static_cast<size_t>(hd));
                    const RopeParams rp{hd - 8, false, 10000.0f, 1.0f, nullptr};
                    std::vector<Floats> got[2];
                    std::vector<uint8_t> caches[2];
                    for (int chained = 0; chained < 2; ++chained) {
                        Seqs s2 = seqs(cache, d.n_head_kv, hd, d.head_dim_v, hist);
                        const Tensor qt = dv.in(q0, ldq, T), kt = dv.in(k0, n_kv, T), vt = dv.in(v0, n_kv, T);
                        const RopeHeads heads[2] = {{qt, d.n_head, stride, dv.in(qn)}, {kt, d.n_head_kv, hd, dv.in(kn)}};
                        ops.norm_rope(s2.batch, heads, hd, 1e-6f, rp);
                        if (!chained) (void)dv.out(kt);
                        ops.kv_store(s2.batch, 0, kt, vt);
                        got[chained] = {dv.out(qt), dv.out(kt)};
                        for (SeqState* st : {&s2.a, &s2.b}) {
                            const KvCache& c = *st->kv;
                            const size_t kb = static_cast<size_t>(d.n_head_kv * c.n_ctx()) * c.k_stride(),
                                         vb = static_cast<size_t>(d.n_head_kv * c.n_ctx()) * c.v_stride();
                            std::vector<uint8_t> bytes(kb + vb);
                            ops.to_host(bytes.data(), c.k_head(0, 0), kb);
                            ops.to_host(bytes.data() + kb, c.v_head(0, 0), vb);
                            caches[chained].insert(caches[chained].end(), bytes.begin(), bytes.end());
                        }
                    }
                    EXPECT(got[1][0] == got[0][0]);
                    EXPECT(got[1][1] == got[0][1]);
                    EXPECT(caches[1] == caches[0]);
                }

                const Floats q = rng.normal(static_cast<size_t>(T * ldq));
                const Tensor out_t = dv.zeros(d.n_head * d.head_dim_v, T), out1_t = dv1.zeros(d.n_head * d.head_dim_v, T);
                ops.attention(s.batch, 0, d, dv.in(q, ldq, T), stride, gated, out_t);
                const Floats out = dv.out(out_t);  // ops' queue done: the cache complete for ops1
                ops1.attention(s.batch, 0, d, dv1.in(q, ldq, T), stride, gated, out1_t);
                const Floats out1 = dv1.out(out1_t);
                const ref::KvHost kva = dv.kv(*s.a.kv, 0, d.n_head_kv), kvb = dv.kv(*s.b.kv, 0, d.n_head_kv);
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t) {
                    const ref::KvHost& kvh = t < 3 ? kva : kvb;
                    const int64_t n_pos = (t < 3 ? hist + t : t - 3) + 1;
                    for (int64_t h = 0; h < d.n_head; ++h) {
                        const float* qh = q.data() + t * ldq + h * stride;
                        const ref::Vec o =
                            ref::attend(qh, d.head_dim, d.head_dim_v, kvh, h / (d.n_head / d.n_head_kv), n_pos);
                        for (int64_t i = 0; i < d.head_dim_v; ++i)
                            want.push_back(o[i] * (gated ? ref::sigmoid(qh[d.head_dim + i]) : 1.0));
                    }
                }
                INFO(type_info(cache).name << (gated ? " gated" : ""));
                close(out, want, 1e-4, 1e-5);
                EXPECT(out == out1);
                // A row alone (a decode step) gives that row of the window: batch invariance.
                const Tensor solo_t = dv.zeros(d.n_head * d.head_dim_v, 1);
                ops.attention(Batch::single(s.a, hist + 2, 1), 0, d, dv.in(Floats(q.begin() + 2 * ldq, q.begin() + 3 * ldq), ldq, 1),
                              stride, gated, solo_t);
                const Floats solo = dv.out(solo_t);
                const int64_t w = d.n_head * d.head_dim_v;
                EXPECT(std::equal(solo.begin(), solo.end(), out.begin() + 2 * w));
                // The output projection of what attention wrote (a GPU backend quantizes it in
                // its merging kernel) equals the product of those values uploaded afresh.
                const MatView wo = ops.prepare_weight(weight(GgmlType::Q8_0, w, 24).view);
                ops.attention(s.batch, 0, d, dv.in(q, ldq, T), stride, gated, out_t);
                const Tensor proj = dv.zeros(24, T), proj_fresh = dv.zeros(24, T);
                ops.matmul(wo, out_t, proj);
                ops.matmul(wo, dv.in(dv.out(out_t), w, T), proj_fresh);
                EXPECT(dv.out(proj) == dv.out(proj_fresh));
                ran("attention");
            }
    }

    GdnDims gdn_dims() {
        GdnDims d;
        d.nk = 2, d.nv = 4, d.dk = 16, d.dv = 8, d.conv_k = 4;
        return d;
    }

    void gdn() {
        for (bool tiled : {false, true}) {
            INFO((tiled ? "tiled" : "grouped") << " value heads");
            gdn(tiled);
        }
    }

    void gdn(bool tiled) {
        Ops &ops = be.ops(), &ops1 = be.ops1();
        GdnDims d = gdn_dims();
        d.tiled = tiled;
        const int64_t nv = d.nv, r = d.nv / d.nk, cd = d.conv_dim();
        for (int64_t T : {1, 6}) {
            Dev m{ops};
            const Floats ba = rng.normal(static_cast<size_t>(T * 2 * nv), 2.0f);
            const Floats a = rng.uniform(static_cast<size_t>(nv), -2.0f, -0.1f), dt = rng.normal(static_cast<size_t>(nv));
            const Tensor beta_t = m.zeros(nv, T), g_t = m.zeros(nv, T);
            ops.gdn_gates(d, m.in(ba, 2 * nv, T), m.in(a), m.in(dt), beta_t, g_t);
            ref::Vec wb, wg;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t h = 0; h < nv; ++h) {
                    // tiled: [b(nv) | a(nv)]; grouped: per key head [b(r) | a(r)]
                    const int64_t ib = tiled ? h : (h / r) * 2 * r + h % r, ia = tiled ? nv + h : ib + r;
                    wb.push_back(ref::sigmoid(ba[t * 2 * nv + ib]));
                    wg.push_back(a[h] * ref::softplus(double(ba[t * 2 * nv + ia]) + dt[h]));
                }
            close(m.out(beta_t), wb, 1e-6, 1e-7);
            close(m.out(g_t), wg, 1e-5, 1e-6);
            ran("gdn_gates");
            {
                // A layer's order on the device's own rows: gates, conv step, recurrence, the
                // gated norm and a product of it (a GPU holds the gates for the recurrence's
                // kernel and the recurrence for the norm, which that kernel then runs), the
                // bits of the ops run one at a time, each result brought to the host before
                // the next op. Value heads of 32: the GPU's norm there quantizes whole heads.
                GdnDims e = d;
                e.dv = 32;
                const int64_t K = e.conv_k, ce = e.conv_dim();
                const Floats x = rng.normal(static_cast<size_t>(T * ce)), w = rng.normal(static_cast<size_t>(ce * K));
                const Floats cs0 = rng.normal(static_cast<size_t>((K - 1) * ce));
                const Floats ss0 = rng.normal(static_cast<size_t>(nv * e.dv * e.dk), 0.1f);
                const Floats zv = rng.normal(static_cast<size_t>(T * e.value_dim())), nw = rng.normal(static_cast<size_t>(e.dv));
                const MatView ow = ops.prepare_weight(weight(GgmlType::Q8_0, e.value_dim(), 24).view);
                std::vector<Floats> got[2];
                for (int chained = 0; chained < 2; ++chained) {
                    const Tensor bt = m.zeros(nv, T), gl = m.zeros(nv, T), u = m.zeros(ce, T);
                    const Tensor o = m.zeros(e.value_dim(), T), prod = m.zeros(24, T);
                    // Every input on the device first: a copy in is an op that issues held work.
                    float *cs = m.in(cs0), *ss = m.in(ss0), *a_d = m.in(a), *dt_d = m.in(dt), *w_d = m.in(w);
                    const Tensor z_t = m.in(zv, e.value_dim(), T);
                    const float* nw_d = m.in(nw);
                    const Tensor ba_t = m.in(ba, 2 * nv, T), x_t = m.in(x, ce, T);
                    ops.gdn_gates(e, ba_t, a_d, dt_d, bt, gl);
                    if (!chained) (void)m.out(gl);
                    ops.gdn_conv(e, x_t, w_d, cs, u);
                    if (!chained) (void)m.out(u);
                    ops.gdn_recurrent(e, u, gl, bt, ss, o);
                    if (!chained) (void)m.out(o);
                    // the gated norm of o (a GPU runs it in the recurrence's kernel) and a product of it
                    ops.rms_norm_gated(o, z_t, nw_d, e.dv, 1e-6f);
                    ops.matmul(ow, o, prod);
                    got[chained] = {m.out(o),  m.out(ss, ss0.size()), m.out(cs, cs0.size()),
                                    m.out(bt), m.out(gl),            m.out(prod)};
                }
                for (size_t i = 0; i < got[0].size(); ++i) {
                    INFO("output " << i << " of o, state, conv state, beta, g, the product");
                    EXPECT(got[1][i] == got[0][i]);
                }
            }

            // conv1d_silu; gdn_conv, the same conv and then the L2 norms of the q heads
            // (scaled) and the k heads, at heads of 16 and, past a GPU kernel's block of
            // 128, of 160 (its three-op path).
            const int64_t K = d.conv_k;
            for (const int64_t dk : {int64_t{0}, int64_t{16}, int64_t{160}}) {  // 0: conv1d_silu alone
                GdnDims e = d;
                e.dk = dk > 0 ? dk : d.dk;
                const int64_t ce = e.conv_dim();
                const Floats x = rng.normal(static_cast<size_t>(T * ce)), w = rng.normal(static_cast<size_t>(ce * K));
                const Floats state0 = rng.normal(static_cast<size_t>((K - 1) * ce));
                Floats hist = state0;
                hist.insert(hist.end(), x.begin(), x.end());
                float* state_d = m.in(state0);
                const Tensor u_t = m.zeros(ce, T);
                if (dk == 0) ops.conv1d_silu(e, m.in(x, ce, T), m.in(w), state_d, u_t);
                else ops.gdn_conv(e, m.in(x, ce, T), m.in(w), state_d, u_t);
                ref::Vec want;
                for (int64_t t = 0; t < T; ++t) {
                    const size_t row0 = want.size();
                    for (int64_t c = 0; c < ce; ++c) {
                        double sum = 0;
                        for (int64_t j = 0; j < K; ++j) sum += double(w[c * K + j]) * hist[(t + j) * ce + c];
                        want.push_back(ref::silu(sum));
                    }
                    for (int64_t g = 0; dk > 0 && g < 2 * e.nk; ++g) {
                        double* v = want.data() + row0 + g * dk;
                        double ss = 0;
                        for (int64_t i = 0; i < dk; ++i) ss += v[i] * v[i];
                        const double f = (g < e.nk ? 1.0 / std::sqrt(double(dk)) : 1.0) / std::max(std::sqrt(ss), 1e-6);
                        for (int64_t i = 0; i < dk; ++i) v[i] *= f;
                    }
                }
                close(m.out(u_t), want, 1e-5, 1e-6);
                const Floats state = m.out(state_d, state0.size());
                EXPECT(std::equal(state.begin(), state.end(), hist.end() - (K - 1) * ce));  // the last K-1 rows
                ran(dk == 0 ? "conv1d_silu" : "gdn_conv");
            }
        }
        for (int64_t T : {1, 5, 40}) {
            Dev m{ops}, m1{ops1};
            // Prepared rows as the model makes them: q and k L2-normed (q scaled), decays < 1.
            const Tensor ut = m.in(rng.normal(static_cast<size_t>(T * cd)), cd, T);
            ops.l2_norm(ut, 0, d.nk, d.dk, 1e-6f, 0.25f);
            ops.l2_norm(ut, d.key_dim(), d.nk, d.dk, 1e-6f, 1.0f);
            const Floats u = m.out(ut);
            const Floats g = rng.uniform(static_cast<size_t>(T * d.nv), -0.3f, 0.0f);
            const Floats beta = rng.uniform(g.size(), 0.0f, 1.0f);
            const Floats s0 = rng.normal(static_cast<size_t>(d.nv * d.dv * d.dk), 0.5f);
            std::vector<double> S(s0.begin(), s0.end());
            ref::Vec want;
            ref::delta_rule(d, u.data(), g.data(), beta.data(), T, S, want);
            const Tensor gt = m.in(g, d.nv, T), bt = m.in(beta, d.nv, T);
            float *s_rec = m.in(s0), *s_rec1 = m1.in(s0);
            const Tensor o_rec_t = m.zeros(d.value_dim(), T), o_rec1_t = m1.zeros(d.value_dim(), T);
            ops.gdn_recurrent(d, ut, gt, bt, s_rec, o_rec_t);
            ops1.gdn_recurrent(d, m1.in(u, cd, T), m1.in(g, d.nv, T), m1.in(beta, d.nv, T), s_rec1, o_rec1_t);
            const Floats o_rec = m.out(o_rec_t), o_rec1 = m1.out(o_rec1_t);
            const Floats s_rec_h = m.out(s_rec, s0.size()), s_rec1_h = m1.out(s_rec1, s0.size());
            close(o_rec, want, 1e-4, 1e-5);
            close(s_rec_h, ref::Vec(S.begin(), S.end()), 1e-4, 1e-5);
            EXPECT(o_rec == o_rec1);
            EXPECT(s_rec_h == s_rec1_h);
            ran("gdn_recurrent");
            for (int64_t chunk : {4, 16}) {
                float* s_chk = m.in(s0);
                const Tensor o_chk = m.zeros(d.value_dim(), T);
                ops.gdn_chunked(d, ut, gt, bt, s_chk, o_chk, chunk);
                close(m.out(o_chk), want, 1e-4, 2e-5);
                close(m.out(s_chk, s0.size()), ref::Vec(S.begin(), S.end()), 1e-4, 2e-5);
                ran("gdn_chunked");
            }
        }
    }

    void moe() {
        Ops &ops = be.ops(), &ops1 = be.ops1();
        // The second shape: more experts than a warp has lanes (each lane holds several
        // in the GPU's top-k), and more outputs than one block of the GPU's combine.
        struct Shape {
            int64_t X, k, E, F;
        };
        for (const Shape sh : {Shape{8, 3, 64, 32}, Shape{80, 10, 320, 32}})
        for (int64_t T : {1, 3, 7}) {
            Dev m{ops}, m1{ops1};
            const int64_t X = sh.X, k = sh.k, E = sh.E, F = sh.F;
            INFO("experts " << X << " top " << k << " width " << E << " rows " << T);
            const Floats raw = rng.normal(static_cast<size_t>(T * X), 2.0f);
            int32_t* ids_d = m.ids(static_cast<size_t>(T * k));
            float* wt_d = m.zeros(static_cast<size_t>(T * k));
            ops.topk_softmax(m.in(raw, X, T), k, ids_d, wt_d);
            const Ids ids = m.out_ids(ids_d, static_cast<size_t>(T * k));
            const Floats wt = m.out(wt_d, static_cast<size_t>(T * k));
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
            {
                // The router's product and the routing on the device's own rows (a GPU holds
                // the product and routes in its last block): the bits of the two ops run one
                // at a time, the logits brought to the host in between; f32 and f16 routers.
                const Floats hx = rng.normal(static_cast<size_t>(T * E));
                for (GgmlType rt : {GgmlType::F32, GgmlType::F16}) {
                    INFO("router " << type_info(rt).name);
                    const MatView rw = ops.prepare_weight(weight(rt, E, X).view);
                    std::vector<Floats> got[2];
                    Ids got_ids[2];
                    for (int chained = 0; chained < 2; ++chained) {
                        const Tensor hx_t = m.in(hx, E, T), lg = m.zeros(X, T);
                        int32_t* ci = m.ids(static_cast<size_t>(T * k));
                        float* cw = m.zeros(static_cast<size_t>(T * k));
                        ops.matmul(rw, hx_t, lg);
                        if (!chained) (void)m.out(lg);
                        ops.topk_softmax(lg, k, ci, cw);
                        got[chained] = {m.out(lg), m.out(cw, static_cast<size_t>(T * k))};
                        got_ids[chained] = m.out_ids(ci, static_cast<size_t>(T * k));
                    }
                    EXPECT(got[1][0] == got[0][0]);  // the probabilities, in place
                    EXPECT(got[1][1] == got[0][1]);
                    EXPECT(got_ids[1] == got_ids[0]);
                }
            }
            ran("topk_softmax");

            std::vector<const Weight*> gate, up, down;
            std::vector<MatView> gv, uv, dv, gv1, uv1, dv1;
            for (int64_t e = 0; e < X; ++e) {
                gate.push_back(&weight(GgmlType::Q8_0, E, F));
                // up of another type than gate in the second shape: a GPU backend's gate and up
                // by id in one launch (one type) in the first, in two here.
                up.push_back(&weight(X == 80 ? GgmlType::Q4_0 : GgmlType::Q8_0, E, F));
                down.push_back(&weight(GgmlType::Q8_0, F, E));
            }
            for (int64_t e = 0; e < X; ++e) {
                gv.push_back(ops.prepare_weight(gate[e]->view)), uv.push_back(ops.prepare_weight(up[e]->view));
                dv.push_back(ops.prepare_weight(down[e]->view));
                gv1.push_back(ops1.prepare_weight(gate[e]->view)), uv1.push_back(ops1.prepare_weight(up[e]->view));
                dv1.push_back(ops1.prepare_weight(down[e]->view));
            }
            const Floats h = rng.normal(static_cast<size_t>(T * E));
            const Tensor ht = m.in(h, E, T), routed_t = m.zeros(E, T * k), routed1_t = m1.zeros(E, T * k);
            EXPECT(ops.moe_experts(gv, uv, dv, ids_d, k, ht, routed_t, nullptr));
            EXPECT(ops1.moe_experts(gv1, uv1, dv1, m1.in_ids(ids), k, m1.in(h, E, T), routed1_t, nullptr));
            const Floats routed = m.out(routed_t), routed1 = m1.out(routed1_t);
            ref::Vec want, mag;
            for (int64_t i = 0; i < T * k; ++i) {
                const int32_t e = ids[i];
                const float* hr = h.data() + (i / k) * E;
                const ref::Vec gg = ref::matmul(gate[e]->view, hr, 1), uu = ref::matmul(up[e]->view, hr, 1);
                Floats act(static_cast<size_t>(F));
                for (int64_t j = 0; j < F; ++j) act[j] = static_cast<float>(ref::silu(gg[j]) * uu[j]);
                ref::Vec mg;
                const ref::Vec y = ref::matmul(down[e]->view, act.data(), 1, &mg);
                want.insert(want.end(), y.begin(), y.end());
                mag.insert(mag.end(), mg.begin(), mg.end());
            }
            close(routed, want, 3e-2, 1e-3, &mag);  // two quantized products in a row
            EXPECT(routed == routed1);
            if (T > 1) {
                // The last token alone (a decode step) gives its rows of the window bit for
                // bit, though a window of many rows takes the experts one at a time.
                const Ids last(ids.end() - k, ids.end());
                const Floats h_last(h.end() - E, h.end());
                const Tensor alone_t = m.zeros(E, k);
                ops.moe_experts(gv, uv, dv, m.in_ids(last), k, m.in(h_last, E, 1), alone_t, nullptr);
                const Floats alone = m.out(alone_t);
                EXPECT(alone == Floats(routed.end() - k * E, routed.end()));
            }
            {
                // Experts with null views are computed elsewhere: their rows keep what they
                // hold (here the sentinel), the others are the same bits as before.
                std::vector<MatView> gs = gv, us = uv, ds = dv;
                for (int64_t e = 0; e < X; e += 2) gs[e].data = us[e].data = ds[e].data = nullptr;
                const Floats sentinel(static_cast<size_t>(T * k * E), 7.0f);
                const Tensor part_t = m.in(sentinel, E, T * k);
                ops.moe_experts(gs, us, ds, ids_d, k, ht, part_t, nullptr);
                const Floats part = m.out(part_t);
                for (int64_t i = 0; i < T * k; ++i)
                    for (int64_t j = 0; j < E; ++j) {
                        const size_t at = static_cast<size_t>(i * E + j);
                        EXPECT(part[at] == (ids[i] % 2 == 0 ? 7.0f : routed[at]));
                    }
            }
            // A shared expert with the routed ones: its rows are the bits of its own ops on
            // this backend (matmul_multi of gate and up, swiglu, matmul of down), and the
            // routed rows do not change. One like the routed experts (a GPU takes it in
            // their launches, always for one token), and one twice as wide (a GPU leaves
            // it to the caller: false).
            for (const int64_t SF : {F, 2 * F}) {
                INFO("shared expert width " << SF);
                const MatView sgv = ops.prepare_weight(weight(GgmlType::Q8_0, E, SF).view);
                const MatView suv = ops.prepare_weight(weight(up[0]->view.type, E, SF).view);
                const MatView sdv = ops.prepare_weight(weight(GgmlType::Q8_0, SF, E).view);
                const SharedExpert se{sgv, suv, sdv, m.zeros(E, T)};
                const Tensor with_t = m.zeros(E, T * k);
                const bool took = ops.moe_experts(gv, uv, dv, ids_d, k, ht, with_t, &se);
                EXPECT(m.out(with_t) == routed);
                if (SF == F && T == 1) EXPECT(took);
                if (be.ops().name() == "cpu") EXPECT(took);
                if (!took) continue;
                const Tensor g_t = m.zeros(SF, T), u_t = m.zeros(SF, T), want_t = m.zeros(E, T);
                const MatOut gu[2] = {{sgv, g_t.f(), SF}, {suv, u_t.f(), SF}};
                ops.matmul_multi(gu, ht);
                ops.swiglu(g_t, u_t, g_t);
                ops.matmul(sdv, g_t, want_t);
                const Floats got = m.out(se.out), own = m.out(want_t);
                EXPECT(got == own);
            }
            ran("moe_experts");

            const Floats shared = rng.normal(static_cast<size_t>(T * E)), sg = rng.normal(static_cast<size_t>(E), 0.1f);
            const Tensor out_t = m.zeros(E, T);
            ops.moe_combine(routed_t, wt_d, k, m.in(shared, E, T), m.in(sg), ht, out_t);
            // Within 1e-5 of the terms' magnitudes: ten routed rows of a wide layer cancel.
            ref::Vec comb, comb_mag, routed_only, routed_mag;
            for (int64_t t = 0; t < T; ++t) {
                double dot = 0;
                for (int64_t i = 0; i < E; ++i) dot += double(sg[i]) * h[t * E + i];
                for (int64_t i = 0; i < E; ++i) {
                    double y = 0, mag_i = 0;
                    for (int64_t s = 0; s < k; ++s) {
                        const double term = double(wt[t * k + s]) * routed[(t * k + s) * E + i];
                        y += term;
                        mag_i += std::fabs(term);
                    }
                    routed_only.push_back(y);
                    routed_mag.push_back(mag_i);
                    const double sh = ref::sigmoid(dot) * shared[t * E + i];
                    comb.push_back(y + sh);
                    comb_mag.push_back(mag_i + std::fabs(sh));
                }
            }
            close(m.out(out_t), comb, 1e-5, 1e-6, &comb_mag);
            // No shared expert (qwen3moe): the weighted routed rows alone.
            ops.moe_combine(routed_t, wt_d, k, Tensor{}, nullptr, ht, out_t);
            close(m.out(out_t), routed_only, 1e-5, 1e-6, &routed_mag);
            {
                // A layer's end on the device's own rows: the combine, the residual add, the
                // next layer's norm into h and a product of it (a GPU holds the combine and
                // the add and runs the three in the norm's kernel), the bits of the ops run
                // one at a time, each result brought to the host before the next op.
                const Floats res0 = rng.normal(static_cast<size_t>(T * E)), nw = rng.normal(static_cast<size_t>(E));
                const MatView pw = ops.prepare_weight(weight(GgmlType::Q8_0, E, 24).view);
                for (bool with_shared : {true, false}) {
                    INFO((with_shared ? "with" : "without") << " a shared expert");
                    // chained 2: the combine and the add held, then issued by a copy out.
                    std::vector<Floats> got[3];
                    for (int chained = 0; chained < 3; ++chained) {
                        // Every input on the device first: a copy in is an op that issues held work.
                        const Tensor res = m.in(res0, E, T), hh = m.in(h, E, T), sh_t = m.in(shared, E, T);
                        const Tensor o = m.zeros(E, T), prod = m.zeros(24, T);
                        const float *sg_d = m.in(sg), *nw_d = m.in(nw);
                        ops.moe_combine(routed_t, wt_d, k, with_shared ? sh_t : Tensor{}, with_shared ? sg_d : nullptr,
                                        hh, o);
                        if (!chained) (void)m.out(o);
                        ops.add(res, o);
                        if (chained != 1) (void)m.out(res);
                        ops.rms_norm(res, nw_d, 1e-6f, hh);
                        ops.matmul(pw, hh, prod);
                        got[chained] = {m.out(o), m.out(res), m.out(hh), m.out(prod)};
                    }
                    for (size_t i = 0; i < got[0].size(); ++i) {
                        INFO("output " << i << " of the combine, the residual, the norm, the product");
                        EXPECT(got[1][i] == got[0][i]);
                        EXPECT(got[2][i] == got[0][i]);
                    }
                }
            }
            {
                // A MoE layer on the device's own rows: the experts (with a shared expert like
                // the routed ones, and without one), their combine, the residual add, the next
                // norm and a product of it (a GPU holds the down product, the combine and the
                // add, and runs the four in the norm's kernel), against the same ops with the
                // results brought to the host in between; chained 2: all held, then issued by a
                // copy out.
                const Floats res0 = rng.normal(static_cast<size_t>(T * E)), nw = rng.normal(static_cast<size_t>(E)),
                             sg2 = rng.normal(static_cast<size_t>(E), 0.1f);
                const MatView pw = ops.prepare_weight(weight(GgmlType::Q8_0, E, 24).view);
                const MatView sgv = ops.prepare_weight(weight(GgmlType::Q8_0, E, F).view);
                const MatView suv = ops.prepare_weight(weight(up[0]->view.type, E, F).view);
                const MatView sdv = ops.prepare_weight(weight(GgmlType::Q8_0, F, E).view);
                for (bool with_shared : {true, false}) {
                    INFO((with_shared ? "with" : "without") << " a shared expert");
                    std::vector<Floats> got[3];
                    for (int chained = 0; chained < 3; ++chained) {
                        const Tensor hh = m.in(h, E, T), res = m.in(res0, E, T), rt = m.zeros(E, T * k);
                        const Tensor so = m.zeros(E, T), o = m.zeros(E, T), nrm = m.zeros(E, T), prod = m.zeros(24, T);
                        const float *sg_d = m.in(sg2), *nw_d = m.in(nw), *wt_c = m.in(wt);
                        const int32_t* ids_c = m.in_ids(ids);
                        const SharedExpert se{sgv, suv, sdv, so};
                        if (!ops.moe_experts(gv, uv, dv, ids_c, k, hh, rt, with_shared ? &se : nullptr)) {
                            const Tensor g_t = m.zeros(F, T), u_t = m.zeros(F, T);
                            const MatOut gu[2] = {{sgv, g_t.f(), F}, {suv, u_t.f(), F}};
                            ops.matmul_multi(gu, hh);
                            ops.swiglu(g_t, u_t, g_t);
                            ops.matmul(sdv, g_t, so);
                        }
                        if (!chained) (void)m.out(rt);
                        ops.moe_combine(rt, wt_c, k, with_shared ? so : Tensor{}, with_shared ? sg_d : nullptr, hh, o);
                        if (!chained) (void)m.out(o);
                        ops.add(res, o);
                        if (chained != 1) (void)m.out(res);
                        ops.rms_norm(res, nw_d, 1e-6f, nrm);
                        ops.matmul(pw, nrm, prod);
                        got[chained] = {m.out(rt), m.out(so), m.out(o), m.out(res), m.out(nrm), m.out(prod)};
                    }
                    for (size_t i = 0; i < got[0].size(); ++i) {
                        INFO("output " << i << " of the experts, the shared expert, the combine, the residual, the norm, "
                                          "the product");
                        EXPECT(got[1][i] == got[0][i]);
                        EXPECT(got[2][i] == got[0][i]);
                    }
                }
            }
            ran("moe_combine");
        }
    }

    // The hand-off ops on the backend's device's host-mapped memory: the payload crosses
    // exactly, a wait for a window never published times out, a dropped flag is never
    // seen, an abort releases the waiter, and a publish from the device's queue wakes it.
    // A wait on the host (the CPU) fails by returning nullopt; a wait on the device (a
    // GPU) returns x, leaves it untouched, says so through hand_in_failed, and the step's
    // publish then raises the abort value for the stage after it.
    void handoff() {
        Device& dev = *be.dev;
        Ops& ops = be.ops();
        // The wait's outcome whichever way the backend waits; *returned: whether it gave rows.
        auto waited = [&](Handoff& h, uint64_t w, int64_t ms, Tensor x, bool* returned = nullptr) {
            const std::optional<Tensor> r = ops.handoff_wait(h, w, ms, x);
            if (returned) *returned = r.has_value();
            return r.has_value() && !ops.hand_in_failed(h);
        };
        for (int64_t T : {1, 5}) {
            const int64_t E = 24;
            Dev m{ops};
            Handoff h(dev, static_cast<size_t>(8 * E));
            const Floats x = rng.normal(static_cast<size_t>(T * (E + 3)));
            const Tensor xs = Tensor::f32(m.in(x) + 1, E, T, E + 3);  // strided rows
            ops.handoff_publish(xs, h, 7, false);
            EXPECT(ready_word(h, 7) == 7);
            ran("handoff_publish");
            float* got_d = m.in(Floats(static_cast<size_t>(T * E), -1.0f));
            const std::optional<Tensor> in = ops.handoff_wait(h, 7, 1000, Tensor::f32(got_d, E, T));
            EXPECT((in && in->ne0 == E && in->ne1 == T && in->contiguous()));
            EXPECT(!ops.hand_in_failed(h));
            // The rows to run on: the payload in place, or x after a copy (the backend's
            // choice); to_host reads either (the payload is host-mapped).
            if (in) EXPECT((in->data == h.payload() || in->data == got_d));
            Floats got(static_cast<size_t>(T * E), -1.0f);
            if (in) got = m.out(*in);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < E; ++i) EXPECT(got[t * E + i] == x[t * (E + 3) + 1 + i]);
            ran("handoff_wait");
            // Publishing the payload itself (a stage that ran in place): no copy, the word raised.
            if (in && in->data == h.payload()) {
                ops.handoff_publish(*in, h, 8, false);
                EXPECT(ready_word(h, 8) == 8);
                const std::optional<Tensor> again = ops.handoff_wait(h, 8, 1000, Tensor::f32(got_d, E, T));
                EXPECT(again.has_value());
                if (again) {
                    const Floats back = m.out(*again);
                    EXPECT(std::memcmp(back.data(), got.data(), got.size() * sizeof(float)) == 0);
                }
                ran("handoff_publish");
                h.reset();
            }

            const Floats minus1(got.size(), -1.0f);
            float* untouched = m.in(minus1);
            // A step's order: wait, its layers, publish, then the host asks hand_in_failed.
            const std::optional<Tensor> r12 = ops.handoff_wait(h, 12, 20, Tensor::f32(untouched, E, T));  // never
            const bool on_device = r12.has_value();  // the backend waits on the device
            std::unique_ptr<Handoff> next;
            if (on_device) {  // the failed step's publish releases the next stage at once
                next = std::make_unique<Handoff>(dev, static_cast<size_t>(8 * E));
                ops.handoff_publish(xs, *next, 12, false);
                EXPECT(ready_word(*next, Handoff::kAbort) == Handoff::kAbort);
                ran("handoff_publish");
            }
            EXPECT((!r12 || ops.hand_in_failed(h)));
            EXPECT(h.failure() == Handoff::Wait::TimedOut);
            EXPECT(h.error() == Handoff::kTimeout);
            const Floats untouched_back = m.out(untouched, got.size());
            EXPECT(std::all_of(untouched_back.begin(), untouched_back.end(), [](float v) { return v == -1.0f; }));
            ran("handoff_wait");
            if (on_device) {  // a good wait's publish raises the window as always
                h.reset();
                ops.handoff_publish(xs, h, 13, false);
                EXPECT(ops.handoff_wait(h, 13, 1000, Tensor::f32(got_d, E, T)).has_value());
                ops.handoff_publish(xs, *next, 13, false);
                EXPECT(!ops.hand_in_failed(h));
                EXPECT(ready_word(*next, 13) == 13);
                ran("handoff_publish");
            }

            h.reset();
            ops.handoff_publish(xs, h, 9, /*drop=*/true);
            EXPECT(!waited(h, 9, 20, Tensor::f32(untouched, E, T)));
            ran("handoff_publish");

            h.reset();
            h.abort();
            EXPECT(!waited(h, 10, 0, Tensor::f32(untouched, E, T)));  // no limit: the abort ends it
            EXPECT(h.failure() == Handoff::Wait::Aborted);
            ran("handoff_wait");

            h.reset();
            dev.submit([&] { ops.handoff_publish(xs, h, 11, false); });
            const DeviceEvent ev = dev.record();
            // A device's wait would hold back its own stream and the publish queued on it,
            // so there the publish goes first (stages wait on other stages' streams).
            if (on_device) EXPECT(ev.wait(5000));
            float* other = m.zeros(got.size());
            const std::optional<Tensor> in11 = ops.handoff_wait(h, 11, 5000, Tensor::f32(other, E, T));
            EXPECT(in11.has_value());
            EXPECT(!ops.hand_in_failed(h));
            EXPECT(ev.wait(5000));
            if (in11) {
                const Floats back = m.out(*in11);
                EXPECT(std::memcmp(back.data(), got.data(), got.size() * sizeof(float)) == 0);
            }
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
        Harness h{be};
        h.get_rows();
        h.norms();
        h.elementwise();
        h.matmuls();
        h.fused_products();
        h.attention();
        h.gdn();
        h.moe();
        h.handoff();
        ops.insert(h.ops_seen.begin(), h.ops_seen.end());
        cases += h.cases;
    }
    CHECK(ops.size() == 28);  // every op of engine/backend/ops.h, memory and host copies included
    if (g_failed == 0)
        std::printf("ops: %zu ops x %zu backends, %lld cases passed\n", ops.size(), bes.size(),
                    static_cast<long long>(cases));
    else
        std::printf("ops: %zu ops x %zu backends, %lld cases, %lld failed checks\n", ops.size(), bes.size(),
                    static_cast<long long>(cases), static_cast<long long>(g_failed));
}
