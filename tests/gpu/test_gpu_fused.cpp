// Fewer launches, the same bytes: the ops that quantize what they write (kernels/cuda/
// fused.cu) against the plain op followed by quantize_act, at widths that leave a kernel's
// last round of threads partly past the row (and the head, and the grid's end); and
// matmul_q_multi's weights in one launch against one matmul_q each.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/quant/quant.h"
#include "kernels/cuda/gpu.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/random_helpers.h"

namespace strata::gpu {
namespace {

// Device memory holding host values (or zeros); freed with it.
struct Mem {
    void* p = nullptr;
    size_t bytes;
    explicit Mem(size_t n) : bytes(n) {
        GPU_REQUIRE(gpuMalloc(&p, bytes));
        GPU_REQUIRE(gpuMemsetAsync(p, 0, bytes, 0));
        GPU_REQUIRE(gpuStreamSynchronize(0));
    }
    explicit Mem(const std::vector<float>& v) : Mem(v.size() * sizeof(float)) {
        GPU_REQUIRE(gpuMemcpyAsync(p, v.data(), bytes, gpuMemcpyDefault, 0));
        GPU_REQUIRE(gpuStreamSynchronize(0));
    }
    ~Mem() { (void)gpuFree(p); }
    Mem(const Mem&) = delete;
    Mem& operator=(const Mem&) = delete;
    float* f() const { return static_cast<float*>(p); }
    std::vector<uint8_t> host(Stream s) const {
        stream_sync(s);
        std::vector<uint8_t> h(bytes);
        GPU_REQUIRE(gpuMemcpyAsync(h.data(), p, bytes, gpuMemcpyDefault, 0));
        GPU_REQUIRE(gpuStreamSynchronize(0));
        return h;
    }
};

// Where two byte images first differ (-1: nowhere), for the failure message.
int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    if (a.size() != b.size()) return 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i] != b[i]) return static_cast<int64_t>(i);
    return -1;
}
#define CHECK_SAME(a, b)                                        \
    do {                                                        \
        const std::vector<uint8_t> a_ = (a), b_ = (b);          \
        INFO("first byte that differs: " << first_diff(a_, b_)); \
        CHECK(first_diff(a_, b_) == -1);                         \
    } while (0)

Rows rows_of(const Mem& m, int64_t n, int64_t rows) { return {m.f(), n, rows, n}; }

// Values at three scales, a row of zeros last (a block whose step is 0).
std::vector<float> values(int64_t n, int64_t rows, uint32_t seed) {
    std::vector<float> v = test::gaussian(static_cast<size_t>(n * rows), seed, 3.0f);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>((rows - 1) * n + i)] = 0.0f;
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] *= 0.001f;
    return v;
}

}  // namespace

TEST_CASE("rms_norm_q, add_rms_norm_q, moe_combine_add_rms_norm_q, rms_norm_gated_q and swiglu_q write what the ops and quantize_act write", "[gpu]") {
    if (!start_device()) return;
    // A stream of its own, as GpuOps has: a CPU HIP runtime does not order kernels queued
    // on the null stream after one another.
    const Stream s = stream_create();
    constexpr int64_t T = 3;
    for (int64_t n : {96, 640, 1088}) {  // rms_norm's 512 threads: one part round, two, three
        INFO("n " << n);
        const size_t fb = static_cast<size_t>(n * T) * sizeof(float), qb = act_q_bytes(n, T);
        const std::vector<float> x = values(n, T, 1), w = test::gaussian(static_cast<size_t>(n), 2);
        const Mem xd(x), wd(w);
        for (const float* wp : {static_cast<const float*>(wd.f()), static_cast<const float*>(nullptr)}) {
            const Mem y0(fb), y1(fb), q0(qb), q1(qb);
            rms_norm(rows_of(xd, n, T), wp, 1e-6f, rows_of(y0, n, T), s);
            quantize_act(rows_of(y0, n, T), q0.p, s);
            rms_norm_q(rows_of(xd, n, T), wp, 1e-6f, rows_of(y1, n, T), q1.p, s);
            CHECK_SAME(y1.host(s), y0.host(s));
            CHECK_SAME(q1.host(s), q0.host(s));
        }
        {  // the residual add first
            const std::vector<float> a = test::gaussian(static_cast<size_t>(n * T), 8);
            const Mem x0(x), x1(x), ad(a), y0(fb), y1(fb), q0(qb), q1(qb);
            add(rows_of(x0, n, T), rows_of(ad, n, T), s);
            rms_norm(rows_of(x0, n, T), wd.f(), 1e-6f, rows_of(y0, n, T), s);
            quantize_act(rows_of(y0, n, T), q0.p, s);
            add_rms_norm_q(rows_of(x1, n, T), rows_of(ad, n, T), wd.f(), 1e-6f, rows_of(y1, n, T), q1.p, s);
            CHECK_SAME(x1.host(s), x0.host(s));
            CHECK_SAME(y1.host(s), y0.host(s));
            CHECK_SAME(q1.host(s), q0.host(s));
        }
        for (const int64_t k : {1, 3, 10})  // a MoE layer's combine first, then the add and the norm
            for (bool with_shared : {true, false}) {
                INFO("k " << k << (with_shared ? ", a shared expert" : ""));
                const std::vector<float> routed = test::gaussian(static_cast<size_t>(n * T * k), 9),
                                         wt = test::gaussian(static_cast<size_t>(T * k), 10),
                                         sh = test::gaussian(static_cast<size_t>(n * T), 11),
                                         sg = test::gaussian(static_cast<size_t>(n), 12, 0.1f), h = values(n, T, 13);
                const Mem rd(routed), wtd(wt), shd(sh), sgd(sg), x0(x), x1(x), h0(h), h1(h), o0(fb), o1(fb), q0(qb),
                    q1(qb);
                const auto comb = [&](const Mem& hm) {
                    return MoeCombine{rows_of(rd, n, T * k), wtd.f(),
                                      k,             with_shared ? rows_of(shd, n, T) : Rows{},
                                      with_shared ? sgd.f() : nullptr, rows_of(hm, n, T)};
                };
                moe_combine(comb(h0), rows_of(o0, n, T), s);
                add(rows_of(x0, n, T), rows_of(o0, n, T), s);
                rms_norm(rows_of(x0, n, T), wd.f(), 1e-6f, rows_of(h0, n, T), s);  // into h, as a layer's next norm
                quantize_act(rows_of(h0, n, T), q0.p, s);
                moe_combine_add_rms_norm_q(comb(h1), rows_of(o1, n, T), rows_of(x1, n, T), wd.f(), 1e-6f,
                                           rows_of(h1, n, T), q1.p, s);
                CHECK_SAME(o1.host(s), o0.host(s));
                CHECK_SAME(x1.host(s), x0.host(s));
                CHECK_SAME(h1.host(s), h0.host(s));
                CHECK_SAME(q1.host(s), q0.host(s));
            }
        const std::vector<float> g = values(n, T, 3), u = test::gaussian(static_cast<size_t>(n * T), 4);
        const Mem gd(g), ud(u), y0(fb), q0(qb), q1(qb);
        swiglu(rows_of(gd, n, T), rows_of(ud, n, T), rows_of(y0, n, T), s);
        quantize_act(rows_of(y0, n, T), q0.p, s);
        swiglu_q(rows_of(gd, n, T), rows_of(ud, n, T), rows_of(gd, n, T), q1.p, s);  // into g, as the experts'
        CHECK_SAME(gd.host(s), y0.host(s));
        CHECK_SAME(q1.host(s), q0.host(s));
    }
    for (int64_t head : {32, 128, 160}) {  // the gated norm's 128 threads: part of one round, one, two
        INFO("head " << head);
        const int64_t n = 4 * head;
        const size_t qb = act_q_bytes(n, T);
        const std::vector<float> x = values(n, T, 5), z = test::gaussian(static_cast<size_t>(n * T), 6),
                                 w = test::gaussian(static_cast<size_t>(head), 7);
        const Mem x0(x), x1(x), zd(z), wd(w), q0(qb), q1(qb);
        rms_norm_gated(rows_of(x0, n, T), rows_of(zd, n, T), wd.f(), head, 1e-6f, s);
        quantize_act(rows_of(x0, n, T), q0.p, s);
        rms_norm_gated_q(rows_of(x1, n, T), rows_of(zd, n, T), wd.f(), head, 1e-6f, q1.p, s);
        CHECK_SAME(x1.host(s), x0.host(s));
        CHECK_SAME(q1.host(s), q0.host(s));
    }
    stream_destroy(s);
}

TEST_CASE("gdn_conv writes what conv1d_silu and the two l2_norms write", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    constexpr int64_t K = 4;
    struct Dims {
        int64_t nk, dk, vd;
    };
    // Heads of part of the block, all of it; v channels of part of a block, several blocks.
    for (const Dims dm : {Dims{2, 16, 40}, Dims{1, 128, 256}, Dims{3, 96, 300}})
        for (int64_t T : {1, 5, 40}) {
            INFO("nk " << dm.nk << " dk " << dm.dk << " T " << T);
            const int64_t cd = 2 * dm.nk * dm.dk + dm.vd;
            const float q_scale = 1.0f / std::sqrt(static_cast<float>(dm.dk));
            const std::vector<float> x = values(cd, T, 30), w = test::gaussian(static_cast<size_t>(cd * K), 31),
                                     st = test::gaussian(static_cast<size_t>((K - 1) * cd), 32);
            const Mem xd(x), wd(w), s0(st), s1(st), u0(static_cast<size_t>(cd * T) * sizeof(float)),
                u1(static_cast<size_t>(cd * T) * sizeof(float));
            conv1d_silu(rows_of(xd, cd, T), wd.f(), K, s0.f(), rows_of(u0, cd, T), s);
            l2_norm(rows_of(u0, cd, T), 0, dm.nk, dm.dk, 1e-6f, q_scale, s);
            l2_norm(rows_of(u0, cd, T), dm.nk * dm.dk, dm.nk, dm.dk, 1e-6f, 1.0f, s);
            REQUIRE(gdn_conv(rows_of(xd, cd, T), wd.f(), K, s1.f(), rows_of(u1, cd, T), dm.nk, dm.dk, 1e-6f, q_scale, s));
            CHECK_SAME(u1.host(s), u0.host(s));
            CHECK_SAME(s1.host(s), s0.host(s));
        }
    stream_destroy(s);
}

TEST_CASE("gdn_recurrent with its gates (and its norm) writes what gdn_gates, gdn_recurrent (and rms_norm_gated_q) write", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    struct Dims {
        int64_t nk, nv, dk, dv;
        bool tiled;
    };
    // Both value-head orders; several blocks of state rows per head (dv > a block's warps).
    for (const Dims dm : {Dims{2, 4, 32, 32, false}, Dims{2, 6, 64, 80, true}, Dims{1, 2, 128, 128, false}})
        for (int64_t T : {1, 4}) {
            INFO("nk " << dm.nk << " nv " << dm.nv << " dk " << dm.dk << " dv " << dm.dv << " T " << T);
            const int64_t kd = dm.nk * dm.dk, cd = 2 * kd + dm.nv * dm.dv, vd = dm.nv * dm.dv;
            std::vector<float> u = test::gaussian(static_cast<size_t>(cd * T), 40, 0.3f);
            const std::vector<float> ba = values(2 * dm.nv, T, 41), a = test::gaussian(static_cast<size_t>(dm.nv), 42),
                                     dt = test::gaussian(static_cast<size_t>(dm.nv), 43),
                                     st = test::gaussian(static_cast<size_t>(vd * dm.dk), 44, 0.1f);
            std::vector<float> neg_a(a.size());
            for (size_t i = 0; i < a.size(); ++i) neg_a[i] = -std::fabs(a[i]);  // -exp(A_log): negative
            const Mem ud(u), bad(ba), ad(neg_a), dtd(dt), s0(st), s1(st);
            const size_t nvb = static_cast<size_t>(dm.nv * T) * sizeof(float), ob = static_cast<size_t>(vd * T) * sizeof(float);
            const Mem g0(nvb), g1(nvb), b0(nvb), b1(nvb), o0(ob), o1(ob);
            gdn_gates(rows_of(bad, 2 * dm.nv, T), dm.nk, dm.nv, dm.tiled, ad.f(), dtd.f(), rows_of(b0, dm.nv, T),
                      rows_of(g0, dm.nv, T), s);
            gdn_recurrent(dm.nk, dm.nv, dm.dk, dm.dv, dm.tiled, rows_of(ud, cd, T), rows_of(g0, dm.nv, T),
                          rows_of(b0, dm.nv, T), s0.f(), rows_of(o0, vd, T), s);
            gdn_recurrent(dm.nk, dm.nv, dm.dk, dm.dv, dm.tiled, rows_of(ud, cd, T), rows_of(g1, dm.nv, T),
                          rows_of(b1, dm.nv, T), s1.f(), rows_of(o1, vd, T), s,
                          GdnGateArgs{rows_of(bad, 2 * dm.nv, T), ad.f(), dtd.f()});
            CHECK_SAME(o1.host(s), o0.host(s));
            CHECK_SAME(s1.host(s), s0.host(s));
            CHECK_SAME(g1.host(s), g0.host(s));
            CHECK_SAME(b1.host(s), b0.host(s));
            if (dm.dv % 32 != 0) continue;
            // ... and with the gated norm of o, quantized, in the same launch.
            const std::vector<float> z = test::gaussian(static_cast<size_t>(vd * T), 45),
                                     w = test::gaussian(static_cast<size_t>(dm.dv), 46);
            const size_t qb = act_q_bytes(vd, T);
            const Mem zd(z), wd(w), s2(st), g2(nvb), b2(nvb), o2(ob), q0(qb), q2(qb),
                counters(static_cast<size_t>(dm.nv) * sizeof(unsigned));
            rms_norm_gated_q(rows_of(o0, vd, T), rows_of(zd, vd, T), wd.f(), dm.dv, 1e-6f, q0.p, s);
            gdn_recurrent(dm.nk, dm.nv, dm.dk, dm.dv, dm.tiled, rows_of(ud, cd, T), rows_of(g2, dm.nv, T),
                          rows_of(b2, dm.nv, T), s2.f(), rows_of(o2, vd, T), s,
                          GdnGateArgs{rows_of(bad, 2 * dm.nv, T), ad.f(), dtd.f()},
                          GdnNormArgs{rows_of(zd, vd, T), wd.f(), 1e-6f, 0, {}, static_cast<unsigned*>(counters.p)}, q2.p);
            CHECK_SAME(o2.host(s), o0.host(s));
            CHECK_SAME(q2.host(s), q0.host(s));
            CHECK_SAME(s2.host(s), s0.host(s));
            CHECK_SAME(counters.host(s), std::vector<uint8_t>(counters.bytes, 0));
        }
    stream_destroy(s);
}

TEST_CASE("matmul_q_multi gives each weight's matmul_q", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    const IqTables tab = upload_iq_tables();
    constexpr int64_t n_in = 256;
    const int64_t n_out[4] = {17, 5, 40, 3};
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K})
        for (int64_t T : {1, 3, 20}) {  // decode, verify, prompt kernels
            INFO(type_info(type).name << " T " << T);
            const size_t rb = row_bytes(type, n_in);
            std::vector<std::unique_ptr<Mem>> wmem, ymem, ref;
            std::vector<Weight> ws;
            std::vector<Rows> ys, refs;
            for (int i = 0; i < 4; ++i) {
                const std::vector<float> f = test::gaussian(static_cast<size_t>(n_in * n_out[i]), 10 + i);
                std::vector<float> q((rb * static_cast<size_t>(n_out[i]) + 3) / 4);
                for (int64_t o = 0; o < n_out[i]; ++o)
                    quantize_row(type, f.data() + o * n_in, reinterpret_cast<uint8_t*>(q.data()) + o * rb, n_in);
                wmem.push_back(std::make_unique<Mem>(q));
                ymem.push_back(std::make_unique<Mem>(static_cast<size_t>(n_out[i] * T) * sizeof(float)));
                ref.push_back(std::make_unique<Mem>(static_cast<size_t>(n_out[i] * T) * sizeof(float)));
                ws.push_back({type, 0, static_cast<const uint8_t*>(wmem.back()->p), n_in, n_out[i], rb});
                ys.push_back(rows_of(*ymem.back(), n_out[i], T));
                refs.push_back(rows_of(*ref.back(), n_out[i], T));
            }
            const Mem x(test::gaussian(static_cast<size_t>(n_in * T), 20)), scratch(act_q_bytes(n_in, T));
            const ActQ xq = quantize_act(rows_of(x, n_in, T), scratch.p, s);
            matmul_q_multi(ws, ys, xq, tab, s);
            for (int i = 0; i < 4; ++i) {
                INFO("weight " << i);
                matmul_q(ws[static_cast<size_t>(i)], xq, refs[static_cast<size_t>(i)], tab, s);
                CHECK_SAME(ymem[static_cast<size_t>(i)]->host(s), ref[static_cast<size_t>(i)]->host(s));
            }
        }
    stream_destroy(s);
}

TEST_CASE("matmul_topk writes what matmul and topk_softmax write, and leaves its counter at 0", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    const IqTables tab = upload_iq_tables();
    constexpr int64_t n_in = 96;
    const Mem counter(sizeof(unsigned));
    struct Shape {
        int64_t X, k;
    };
    // Experts fewer than a warp, several per lane, a block's outputs not a whole number of
    // warps; rows of one block of the product, of several, more than the warps of a block.
    for (const Shape sh : {Shape{8, 2}, Shape{80, 10}, Shape{517, 8}})
        for (int64_t T : {1, 3, 9}) {
            INFO("experts " << sh.X << " top " << sh.k << " rows " << T);
            const std::vector<float> w = test::gaussian(static_cast<size_t>(n_in * sh.X), 40),
                                     x = test::gaussian(static_cast<size_t>(n_in * T), 41);
            const Mem wd(w), xd(x), y0(static_cast<size_t>(sh.X * T) * sizeof(float)),
                y1(static_cast<size_t>(sh.X * T) * sizeof(float)), i0(static_cast<size_t>(sh.k * T) * 4),
                i1(static_cast<size_t>(sh.k * T) * 4), w0(static_cast<size_t>(sh.k * T) * 4),
                w1(static_cast<size_t>(sh.k * T) * 4);
            const Weight wt{GgmlType::F32, 0, static_cast<const uint8_t*>(wd.p), n_in, sh.X, n_in * sizeof(float)};
            matmul(wt, rows_of(xd, n_in, T), rows_of(y0, sh.X, T), tab, s);
            topk_softmax(rows_of(y0, sh.X, T), sh.k, static_cast<int32_t*>(i0.p), w0.f(), s);
            for (int rep = 0; rep < 2; ++rep) {  // the counter as the first call left it
                matmul_topk(wt, rows_of(xd, n_in, T), rows_of(y1, sh.X, T), sh.k, static_cast<int32_t*>(i1.p), w1.f(),
                            static_cast<unsigned*>(counter.p), s);
                CHECK_SAME(y1.host(s), y0.host(s));
                CHECK_SAME(i1.host(s), i0.host(s));
                CHECK_SAME(w1.host(s), w0.host(s));
                CHECK_SAME(counter.host(s), std::vector<uint8_t>(sizeof(unsigned), 0));
            }
        }
    stream_destroy(s);
}

TEST_CASE("matmul_ids_swiglu_q writes what matmul_ids_q of gate and up and swiglu_q write", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    const IqTables tab = upload_iq_tables();
    constexpr int64_t n_in = 256, X = 4;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K})
        for (const int64_t F : {int64_t{32}, int64_t{96}})
            for (const int64_t n : {int64_t{1}, int64_t{6}}) {  // routed rows; two more: a shared expert's
                INFO(type_info(type).name << " F " << F << " rows " << n);
                const size_t rb = row_bytes(type, n_in);
                // X + 1 experts per table (the last the shared one), gate's then up's.
                std::vector<std::unique_ptr<Mem>> experts;
                std::vector<const uint8_t*> gate_rows, up_rows;
                for (int e = 0; e < 2 * (X + 1); ++e) {
                    const std::vector<float> f = test::gaussian(static_cast<size_t>(n_in * F), 50 + e);
                    std::vector<float> q((rb * static_cast<size_t>(F) + 3) / 4);
                    for (int64_t o = 0; o < F; ++o)
                        quantize_row(type, f.data() + o * n_in, reinterpret_cast<uint8_t*>(q.data()) + o * rb, n_in);
                    experts.push_back(std::make_unique<Mem>(q));
                    (e <= X ? gate_rows : up_rows).push_back(static_cast<const uint8_t*>(experts.back()->p));
                }
                const auto table = [](const std::vector<const uint8_t*>& v) {
                    auto m = std::make_unique<Mem>(v.size() * sizeof(void*));
                    GPU_REQUIRE(gpuMemcpyAsync(m->p, v.data(), m->bytes, gpuMemcpyDefault, 0));
                    GPU_REQUIRE(gpuStreamSynchronize(0));
                    return m;
                };
                const auto gt = table(gate_rows), ut = table(up_rows);
                std::vector<int32_t> id_v;
                for (int64_t i = 0; i < n; ++i) id_v.push_back(static_cast<int32_t>((3 * i + 1) % X));
                const Mem ids(std::vector<float>(id_v.size()));
                GPU_REQUIRE(gpuMemcpyAsync(ids.p, id_v.data(), ids.bytes, gpuMemcpyDefault, 0));
                GPU_REQUIRE(gpuStreamSynchronize(0));
                const int64_t T = 2, div = n / T > 0 ? n / T : 1, rows = n + T;
                const Mem x(test::gaussian(static_cast<size_t>(n_in * T), 60)), xs(act_q_bytes(n_in, T));
                const ActQ xq = quantize_act(rows_of(x, n_in, T), xs.p, s);
                const size_t fb = static_cast<size_t>(rows * F) * sizeof(float), qb = act_q_bytes(F, rows);
                const Mem g0(fb), u0(fb), q0(qb), g1(fb), u1(fb), q1(qb), counters(static_cast<size_t>(rows * F / 32) * 4);
                const auto* const* gw = static_cast<const uint8_t* const*>(gt->p);
                const auto* const* uw = static_cast<const uint8_t* const*>(ut->p);
                const auto* idp = static_cast<const int32_t*>(ids.p);
                const IdsExtra ex0{n, X, 0, g0.f() + n * F, u0.f() + n * F}, ex1{n, X, 0, g1.f() + n * F, u1.f() + n * F};
                matmul_ids_q(type, gw, n_in, F, rb, idp, div, xq, rows_of(g0, F, rows), tab, s, uw, u0.f(), ex0);
                swiglu_q(rows_of(g0, F, rows), rows_of(u0, F, rows), rows_of(g0, F, rows), q0.p, s);
                for (int rep = 0; rep < 2; ++rep) {  // the counters as the first call left them
                    matmul_ids_swiglu_q(type, gw, uw, n_in, F, rb, idp, div, xq, rows_of(g1, F, rows), u1.f(), ex1, q1.p,
                                        static_cast<unsigned*>(counters.p), tab, s);
                    CHECK_SAME(g1.host(s), g0.host(s));
                    CHECK_SAME(u1.host(s), u0.host(s));
                    CHECK_SAME(q1.host(s), q0.host(s));
                    CHECK_SAME(counters.host(s), std::vector<uint8_t>(counters.bytes, 0));
                }
            }
    stream_destroy(s);
}

TEST_CASE("matmul_ids_combine_add_rms_norm_q writes what matmul_ids_q and moe_combine_add_rms_norm_q write", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    const IqTables tab = upload_iq_tables();
    constexpr int64_t n_in = 64, X = 5, k = 3;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K})
        for (const int64_t E : {int64_t{256}, int64_t{1056}})  // one round of the norm's threads, three
            for (const int64_t T : {int64_t{1}, int64_t{3}})
                for (const bool shared : {true, false}) {
                    INFO(type_info(type).name << " outputs " << E << " tokens " << T << (shared ? " with" : " without")
                                              << " a shared expert");
                    const int64_t in_w = type == GgmlType::Q4_K ? 256 : n_in;  // a whole super-block
                    const size_t rb = row_bytes(type, in_w);
                    std::vector<std::unique_ptr<Mem>> experts;
                    std::vector<const uint8_t*> table;
                    for (int e = 0; e <= X; ++e) {  // the last: the shared expert
                        const std::vector<float> f = test::gaussian(static_cast<size_t>(in_w * E), 80 + e);
                        std::vector<float> q((rb * static_cast<size_t>(E) + 3) / 4);
                        for (int64_t o = 0; o < E; ++o)
                            quantize_row(type, f.data() + o * in_w, reinterpret_cast<uint8_t*>(q.data()) + o * rb, in_w);
                        experts.push_back(std::make_unique<Mem>(q));
                        table.push_back(static_cast<const uint8_t*>(experts.back()->p));
                    }
                    const Mem tbl(table.size() * sizeof(void*));
                    GPU_REQUIRE(gpuMemcpyAsync(tbl.p, table.data(), tbl.bytes, gpuMemcpyDefault, 0));
                    std::vector<int32_t> id_v;
                    for (int64_t i = 0; i < T * k; ++i) id_v.push_back(static_cast<int32_t>((2 * i + 1) % X));
                    const Mem ids(id_v.size() * sizeof(int32_t));
                    GPU_REQUIRE(gpuMemcpyAsync(ids.p, id_v.data(), ids.bytes, gpuMemcpyDefault, 0));
                    GPU_REQUIRE(gpuStreamSynchronize(0));
                    const int64_t n = T * k, rows = n + (shared ? T : 0);
                    const Mem x(test::gaussian(static_cast<size_t>(in_w * rows), 90)), xs(act_q_bytes(in_w, rows));
                    const ActQ xq = quantize_act(rows_of(x, in_w, rows), xs.p, s);
                    const Mem wt(test::gaussian(static_cast<size_t>(T * k), 91)), sg(test::gaussian(static_cast<size_t>(E), 92, 0.1f)),
                        hin(test::gaussian(static_cast<size_t>(E * T), 93)), nw(test::gaussian(static_cast<size_t>(E), 94));
                    const std::vector<float> res = values(E, T, 95);
                    const size_t yb = static_cast<size_t>(rows * E) * sizeof(float), tb = static_cast<size_t>(T * E) * sizeof(float);
                    const auto* const* w = static_cast<const uint8_t* const*>(tbl.p);
                    const auto* idp = static_cast<const int32_t*>(ids.p);
                    const Mem y0(yb), o0(tb), h0(res), n0(tb), q0(act_q_bytes(E, T)), counters(static_cast<size_t>(T) * 4);
                    const IdsExtra ex0 = shared ? IdsExtra{n, X, n, y0.f() + n * E, nullptr} : IdsExtra{};
                    const auto combine = [&](const Mem& y) {
                        return MoeCombine{rows_of(y, E, n), wt.f(), k, shared ? Rows{y.f() + n * E, E, T, E} : Rows{},
                                          shared ? sg.f() : nullptr, rows_of(hin, E, T)};
                    };
                    matmul_ids_q(type, w, in_w, E, rb, idp, 1, xq, rows_of(y0, E, rows), tab, s, nullptr, nullptr, ex0);
                    moe_combine_add_rms_norm_q(combine(y0), rows_of(o0, E, T), rows_of(h0, E, T), nw.f(), 1e-6f,
                                               rows_of(n0, E, T), q0.p, s);
                    for (int rep = 0; rep < 2; ++rep) {  // the counters as the first call left them
                        const Mem y1(yb), o1(tb), h1(res), n1(tb), q1(act_q_bytes(E, T));
                        const IdsExtra ex1 = shared ? IdsExtra{n, X, n, y1.f() + n * E, nullptr} : IdsExtra{};
                        matmul_ids_combine_add_rms_norm_q(type, w, in_w, E, rb, idp, xq, rows_of(y1, E, rows), ex1,
                                                          combine(y1), rows_of(o1, E, T), rows_of(h1, E, T), nw.f(),
                                                          1e-6f, rows_of(n1, E, T), q1.p,
                                                          static_cast<unsigned*>(counters.p), tab, s);
                        CHECK_SAME(y1.host(s), y0.host(s));
                        CHECK_SAME(o1.host(s), o0.host(s));
                        CHECK_SAME(h1.host(s), h0.host(s));
                        CHECK_SAME(n1.host(s), n0.host(s));
                        CHECK_SAME(q1.host(s), q0.host(s));
                        CHECK_SAME(counters.host(s), std::vector<uint8_t>(counters.bytes, 0));
                    }
                }
    stream_destroy(s);
}

TEST_CASE("matmul_add_rms_norm_q writes what matmul_q, add_rms_norm_q write, and leaves its counters at 0", "[gpu]") {
    if (!start_device()) return;
    const Stream s = stream_create();
    const IqTables tab = upload_iq_tables();
    constexpr int64_t n_in = 256;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K})
        // Outputs of one block and of several, a block's last warps past the outputs, a row
        // wider than the norm's block (two rounds of its threads); one row (a decode step),
        // three and eight (verify windows: one block row).
        for (const int64_t n_out : {int64_t{32}, int64_t{96}, int64_t{1056}})
            for (const int64_t T : {int64_t{1}, int64_t{3}, kNormProductRows}) {
                INFO(type_info(type).name << " outputs " << n_out << " rows " << T);
                const size_t rb = row_bytes(type, n_in);
                const std::vector<float> f = test::gaussian(static_cast<size_t>(n_in * n_out), 70);
                std::vector<float> q((rb * static_cast<size_t>(n_out) + 3) / 4);
                for (int64_t o = 0; o < n_out; ++o)
                    quantize_row(type, f.data() + o * n_in, reinterpret_cast<uint8_t*>(q.data()) + o * rb, n_in);
                const Mem wq(q), nw(test::gaussian(static_cast<size_t>(n_out), 71));
                const Weight w{type, 0, static_cast<const uint8_t*>(wq.p), n_in, n_out, rb};
                const Mem x(test::gaussian(static_cast<size_t>(n_in * T), 72)), xs(act_q_bytes(n_in, T));
                const ActQ xq = quantize_act(rows_of(x, n_in, T), xs.p, s);
                const std::vector<float> h = values(n_out, T, 73);
                const size_t fb = static_cast<size_t>(n_out * T) * sizeof(float), qb = act_q_bytes(n_out, T);
                const Mem y0(fb), h0(h), o0(fb), q0(qb), counters(static_cast<size_t>(T) * sizeof(unsigned));
                matmul_q(w, xq, rows_of(y0, n_out, T), tab, s);
                add_rms_norm_q(rows_of(h0, n_out, T), rows_of(y0, n_out, T), nw.f(), 1e-6f, rows_of(o0, n_out, T), q0.p,
                               s);
                for (int rep = 0; rep < 2; ++rep) {  // the counters as the first call left them
                    const Mem y1(fb), h1(h), o1(fb), q1(qb);
                    matmul_add_rms_norm_q(w, xq, rows_of(y1, n_out, T), rows_of(h1, n_out, T), nw.f(), 1e-6f,
                                          rows_of(o1, n_out, T), q1.p, static_cast<unsigned*>(counters.p), tab, s);
                    CHECK_SAME(y1.host(s), y0.host(s));
                    CHECK_SAME(h1.host(s), h0.host(s));
                    CHECK_SAME(o1.host(s), o0.host(s));
                    CHECK_SAME(q1.host(s), q0.host(s));
                    CHECK_SAME(counters.host(s), std::vector<uint8_t>(counters.bytes, 0));
                }
            }
    stream_destroy(s);
}

}  // namespace strata::gpu
