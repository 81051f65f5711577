#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/quant/quant.h"
#include "kernels/cpu/act_quant.h"
#include "kernels/cpu/matmul_q.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd_forms.h"

// GCC contracts a * b + c into an FMA by default in C++ (-ffp-contract=fast, even with
// -std=c++20) in the AVX2 and AVX-512 forms below but cannot in the SSE one: keep every
// form to separate multiplies and adds so the f32 path agrees across instruction sets.
#pragma GCC optimize("fp-contract=off")

namespace strata {
namespace {

constexpr int kRowTile = 4;    // weight rows dequantized together
constexpr int kTokTile = 4;    // tokens sharing those rows
constexpr int64_t kRowsPerTask = 16;

// Float weights are read in their own width and widened to floats in registers, exactly
// (a BF16 value is a float's high half; F16C converts a half exactly), so a product
// computes what it computes on the widened rows. The 16-bit types were dequantized into a
// buffer a 4-row tile at a time, which bound a decode step's products by those stores
// (19-21 GB/s on two threads where F32 read 48); a prompt's rows still go through the
// buffer (kWidenRows), widened once for all its tokens instead of once per 4.
enum class FloatW { F32, BF16, F16 };
// F16 by F16C's vcvtph2ps, in asm (an intrinsic cannot be inlined into these target-less
// forms, as simd::stream), in GCC builds on CPUs with the 256-bit form: clang refuses a
// 512-bit asm output outside an AVX-512 function, so its builds (the fuzzers') and SSE
// CPUs take the buffer. A plain-vector widening (exponent and mantissa shifted into a
// float's, times 2^112) decoded no faster than the buffer.
#if defined(__clang__)
constexpr bool kF16InRegisters = false;
#else
constexpr bool kF16InRegisters = true;
#endif
constexpr int64_t kFloatAhead = 1024;  // bytes ahead a row asks for (tile_dot)
constexpr int64_t kWidenRows = 8;  // tokens up to which 16-bit weights widen in registers (f32_rows)
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint16_t u16x4 __attribute__((vector_size(8)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x4 __attribute__((vector_size(16)));

// Lanes [i, i + kLanes) of a row of W's values as floats.
template <class V, FloatW W>
[[gnu::always_inline]] inline V load_w(const uint8_t* row, int64_t i) {
    if constexpr (W == FloatW::F32) {
        return simd::load_as<V>(reinterpret_cast<const float*>(row) + i);
    } else {
        // F lanes of BF16 values: their bits shifted into a float's high half.
        auto widen = []<class F>(const uint8_t* q) __attribute__((always_inline)) {
            constexpr int n = sizeof(F) / sizeof(float);
            using H = std::conditional_t<n == 16, u16x16, std::conditional_t<n == 8, u16x8, u16x4>>;
            using U = std::conditional_t<n == 16, u32x16, std::conditional_t<n == 8, u32x8, u32x4>>;
            H h;
            std::memcpy(&h, q, sizeof h);
            return (F)(__builtin_convertvector(h, U) << 16);
        };
        const uint8_t* p = row + 2 * i;
#if !defined(__clang__)
        if constexpr (W == FloatW::F16) {  // the 512- and 256-bit forms only (F16C)
            struct H16 {
                uint8_t b[32];
            };
            struct H8 {
                uint8_t b[16];
            };
            V v;
            if constexpr (!simd::is_wide<V>) {
                asm("vcvtph2ps %1, %0" : "=v"(v) : "m"(*reinterpret_cast<const H16*>(p)));
            } else if constexpr (V::kPieces == 2) {
                for (int k = 0; k < 2; ++k)
                    asm("vcvtph2ps %1, %0" : "=x"(v.p[k]) : "m"(*reinterpret_cast<const H8*>(p + 16 * k)));
            } else {  // SSE has no F16C (f32_rows takes the buffer there): lane by lane
                for (int k = 0; k < V::kPieces; ++k)
                    for (int j = 0; j < V::kPieceLanes; ++j) {
                        uint16_t h;
                        std::memcpy(&h, p + 2 * (k * V::kPieceLanes + j), 2);
                        v.p[k][j] = fp16_to_f32(h);
                    }
            }
            return v;
        }
#endif
        if constexpr (!simd::is_wide<V>) {  // the 512-bit form
            return widen.template operator()<V>(p);
        } else {
            V v;
            for (int k = 0; k < V::kPieces; ++k) v.p[k] = widen.template operator()<typename V::Piece>(p + 2 * V::kPieceLanes * k);
            return v;
        }
    }
}

// Value i of a row of W's values as a float (the tails past the last whole vector).
template <FloatW W>
inline float value_w(const uint8_t* row, int64_t i) {
    if constexpr (W == FloatW::F32) {
        float f;
        std::memcpy(&f, row + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        return W == FloatW::BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
    }
}

// Rows r < NR (n values of W each, `stride` bytes apart from `rows`) times x[t] for t < NT.
// The per-element computation is the same whatever the tile sizes and the weights' width;
// the sizes are constants so that the accumulators stay in registers (with the counts
// known only at run time they lived on the stack, and a one-token product of F32 weights
// ran at 3 values a cycle from the cache).
// kAhead: the rows are read from memory (not a buffer of dequantized rows).
template <FloatW W, int NR, int NT, bool kAhead>
void tile_dot(const uint8_t* rows, size_t stride, int64_t n, const float* x, int64_t ldx, float* out, int64_t ldo) {
    constexpr int64_t kBytes = W == FloatW::F32 ? 4 : 2;  // per value
    simd::forms([&]<class V>(simd::Form<V>) __attribute__((always_inline)) {
        const int64_t nv = n / simd::kLanes * simd::kLanes;
        V acc[NR][NT];
        for (int r = 0; r < NR; ++r)
            for (int t = 0; t < NT; ++t) acc[r][t] = simd::zero_as<V>();
        for (int64_t i = 0; i < nv; i += simd::kLanes) {
            // Each row's bytes asked for kFloatAhead ahead, a line at a time; past its end
            // a row asks for the next tile's row r (NR rows on: the rows of a task follow
            // one another), so that tile does not start cold.
            if (kAhead && (i * kBytes) % 64 == 0) {
                const int64_t o = i * kBytes + kFloatAhead, end = n * kBytes;
                for (int r = 0; r < NR; ++r)
                    __builtin_prefetch(o < end ? rows + r * stride + o : rows + (r + NR) * stride + (o - end));
            }
            V xv[NT];
            for (int t = 0; t < NT; ++t) xv[t] = simd::load_as<V>(x + t * ldx + i);
            for (int r = 0; r < NR; ++r) {
                const V wv = load_w<V, W>(rows + r * stride, i);
                for (int t = 0; t < NT; ++t) acc[r][t] += wv * xv[t];
            }
        }
        for (int r = 0; r < NR; ++r)
            for (int t = 0; t < NT; ++t) {
                float s = simd::hsum(acc[r][t]);
                for (int64_t i = nv; i < n; ++i) s += value_w<W>(rows + r * stride, i) * x[t * ldx + i];
                out[t * ldo + r] = s;
            }
    });
}

// nr rows (up to kRowTile) times all T tokens: tiles of kTokTile tokens, then one at a time.
template <FloatW W, bool kAhead>
void rows_dot(const uint8_t* rows, size_t stride, int nr, int64_t n, const float* x, int64_t ldx, int64_t T, float* y,
              int64_t ldy) {
    static_assert(kRowTile == 4 && kTokTile == 4);
    auto tokens = [&]<int NR>(const uint8_t* r, float* yr) {
        int64_t t = 0;
        for (; t + kTokTile <= T; t += kTokTile) tile_dot<W, NR, kTokTile, kAhead>(r, stride, n, x + t * ldx, ldx, yr + t * ldy, ldy);
        for (; t < T; ++t) tile_dot<W, NR, 1, kAhead>(r, stride, n, x + t * ldx, ldx, yr + t * ldy, ldy);
    };
    if (nr == kRowTile) return tokens.template operator()<kRowTile>(rows, y);
    for (int r = 0; r < nr; ++r) tokens.template operator()<1>(rows + static_cast<size_t>(r) * stride, y + r);
}

// Integer-dot path (matmul_q.h): quantize each token of x on its own, once for all the
// weights, then give each task a fixed range of rows of one weight, for all tokens.
constexpr size_t kMaxOuts = 32;  // outputs (and inputs) of one parallel run
static_assert(kMaxOuts <= 32, "matmul_q marks the inputs a thread has quantized in a uint32_t");

// One thread's share of a call's units: claimed one chunk at a time from the front by
// its owner and one unit at a time from the back by a thread that has finished its own.
// front (low 32 bits) and back (high 32 bits) change together, by compare-and-swap. One
// cache line each, so two threads' claims never contend for a line.
struct alignas(64) Share {
    std::atomic<uint64_t> fb{0};

    static uint64_t pack(int64_t f, int64_t b) { return static_cast<uint64_t>(f) | static_cast<uint64_t>(b) << 32; }
    void set(int64_t f, int64_t b) { fb.store(pack(f, b), std::memory_order_relaxed); }
    int64_t front_now() const { return static_cast<int64_t>(fb.load(std::memory_order_relaxed) & 0xFFFFFFFFu); }
    int64_t left() const {
        const uint64_t v = fb.load(std::memory_order_relaxed);
        return static_cast<int64_t>(v >> 32) - static_cast<int64_t>(v & 0xFFFFFFFFu);
    }
    // [*u0, *u1): up to `want` units from the front; false when none are left.
    bool front(int64_t want, int64_t* u0, int64_t* u1) {
        uint64_t v = fb.load(std::memory_order_relaxed);
        for (;;) {
            const auto f = static_cast<int64_t>(v & 0xFFFFFFFFu), b = static_cast<int64_t>(v >> 32);
            if (f >= b) return false;
            const int64_t e = std::min(b, f + std::max<int64_t>(1, std::min(want, (b - f) / 2)));
            if (fb.compare_exchange_weak(v, pack(e, b), std::memory_order_relaxed)) {
                *u0 = f;
                *u1 = e;
                return true;
            }
        }
    }
    bool back(int64_t* u) {
        uint64_t v = fb.load(std::memory_order_relaxed);
        for (;;) {
            const auto f = static_cast<int64_t>(v & 0xFFFFFFFFu), b = static_cast<int64_t>(v >> 32);
            if (f >= b) return false;
            if (fb.compare_exchange_weak(v, pack(f, b - 1), std::memory_order_relaxed)) {
                *u = b - 1;
                return true;
            }
        }
    }
};

constexpr int kMaxShares = 64;

// Activation blocks quantized per claim: a decode step's token of 2048 values is four
// claims, so both threads share it.
constexpr int64_t kQuantBlocks = 16;

// Whether every thread of a product quantizes its activations itself (matmul_q): for
// windows and decode steps (up to kSelfQuantRows rows over all the inputs). Whole
// prompts share the work: self-quantized, a 128-token prompt of a 1B llama ran no faster
// (bench/decode pp128, alternated) and each thread would quantize all of it.
constexpr int64_t kSelfQuantRows = 16;
bool self_quantize(int threads, int64_t rows) { return threads > 1 && rows <= kSelfQuantRows; }

// Whether decode of packed Q8_0 takes the 256-bit AVX-VNNI kernel on a CPU that also runs
// AVX-512 VNNI: on Intel's (Sapphire Rapids) it streamed 3-4% faster (same process,
// alternating; the 4-6 bit formats were 5-30% slower in 256 bits, so only Q8_0). On AMD's
// (an EPYC with AVX-512 VNNI and AVX-VNNI) the two decode equally fast from memory, and
// the 512-bit kernel runs 30-60% faster from the cache (bench/matmul_speed), so there
// it keeps AVX-512.
bool q8_decode_prefers_256() {
    static const bool intel = [] {
        __builtin_cpu_init();
        return __builtin_cpu_is("intel") != 0;
    }();
    return intel && kq::available(kq::Isa::AvxVnni);
}

// The integer path a product of T tokens runs. The same bits on every path; a forced
// path is kept.
kq::Isa path_for(int64_t T, bool packed_q8) {
    const kq::Isa isa = kq::active();
    if (T == 1 && packed_q8 && !kq::forced() && isa >= kq::Isa::Avx512Vnni && q8_decode_prefers_256())
        return kq::Isa::AvxVnni;
    return isa;
}

using RowsFn = void (*)(const kq::Job&, int64_t, int64_t);

// The row kernel of an integer path.
RowsFn rows_fn(kq::Isa isa) {
    switch (isa) {
    case kq::Isa::Amx:
    case kq::Isa::Avx512Vnni: return kq::rows_avx512;
    case kq::Isa::Avx2: return kq::rows_avx2;
    case kq::Isa::AvxVnni: return kq::rows_avxvnni;
    default: return kq::rows_scalar;
    }
}

// Blocks [b0, b1) of row t of x (width values; any MatIn form) into a; the gated form
// goes through a buffer of this thread's.
void quantize_in(const MatIn& x, int64_t width, int64_t t, int64_t b0, int64_t b1, ActQ& a) {
    if (!x.gate) {
        quantize_act_blocks(x.row(t), t, b0, b1, a);
        return;
    }
    thread_local std::vector<float> v;  // grow-only
    if (v.size() < static_cast<size_t>(width)) v.resize(static_cast<size_t>(width));
    const int64_t i0 = b0 * 32, i1 = std::min(width, b1 * 32);
    ops::swiglu(x.gate_row(t) + i0, x.row(t) + i0, i1 - i0, v.data() + i0);
    quantize_act_blocks(v.data(), t, b0, b1, a);
}

// Several activations and the outputs reading them (outs[i] reads ins[in_of[i]]), all in
// one parallel run (ThreadPool::run_each: thread k starts on share k of the rows).
//
// Each thread quantizes the activations its rows read itself, into its own buffers, when
// self_quantize says so; else the threads quantize them together into the caller's, in
// claims of kQuantBlocks blocks, and wait for all the claims before any row. Sharing
// halves the quantization, but every thread then waits for the others' claims and reads
// activation lines that another core wrote, on every call. On the 2-vCPU EPYC this was
// measured on (~250 ns a line between the cores) a 9-row product of a 2048 x 512 weight
// in the cache, its input just written by the caller, took 87 us shared and 51 us
// self-quantized on two threads (80 us on one); from memory, in the whole model, the
// difference is a few percent (docs/benchmarks.md).
void matmul_q(ThreadPool& pool, std::span<const MatIn> ins, std::span<const MatOut> outs, std::span<const int> in_of) {
    // Grow-only, per thread: no allocation once the largest shapes have been seen.
    thread_local ActQ acts[kMaxOuts];
    struct Ctx {
        struct In {
            MatIn m;
            int64_t T;
            int64_t width;
            int64_t q_per_tok;  // quantization claims per token (shared quantization)
            int64_t q0;         // its first claim
        };
        In in[kMaxOuts];
        size_t n_in;
        size_t n;
        int64_t unit;  // rows per unit of work: four 4-row tiles, or two 16-row packed groups
        int n_shares;
        bool self;         // each thread quantizes every input itself
        ActQ* shared;      // the caller's buffers (shared quantization)
        const MatOut* outs;
        int in_of[kMaxOuts];
        void (*fn[kMaxOuts])(const kq::Job&, int64_t, int64_t);  // per output: the path for its T
        int64_t first[kMaxOuts + 1];  // first unit of each output
        int64_t n_q;  // quantization claims in all
        alignas(64) std::atomic<int64_t> q_next{0};
        alignas(64) std::atomic<int64_t> q_done{0};
        Share shares[kMaxShares];
        // Units [u0, u1), which may span several outputs, reading the activations in a.
        // lazy (self-quantized products): bit j is set once this thread has quantized
        // input j into a, which it does before the first rows that read it.
        void rows(ActQ* a, int64_t u0, int64_t u1, uint32_t* lazy) const {
            size_t i = 0;
            while (u0 < u1) {
                while (u0 >= first[i + 1]) ++i;
                const int64_t stop = std::min(u1, first[i + 1]);
                if (const auto j = static_cast<size_t>(in_of[i]); lazy && !(*lazy >> j & 1)) {
                    quantize_input(j, a[j]);
                    *lazy |= uint32_t{1} << j;
                }
                const kq::Job job{&outs[i].w, &a[in_of[i]], outs[i].y, outs[i].ldy};
                fn[i](job, (u0 - first[i]) * unit, std::min(job.w->n_out, (stop - first[i]) * unit));
                u0 = stop;
            }
        }
        // The first bytes of unit u's two streams (packed: its two groups; else its first
        // rows), asked for before the activation is quantized so that the weights are on
        // their way meanwhile.
        void prime(int64_t u) const {
            if (u >= first[n]) return;  // the share was taken whole by a faster thread
            size_t i = 0;
            while (u >= first[i + 1]) ++i;
            const MatView& w = outs[i].w;
            const int64_t r = (u - first[i]) * unit;
            const int64_t groups = (w.n_out + kq::kPackRows - 1) / kq::kPackRows;
            const size_t bytes = w.packed ? packed_size(w) / static_cast<size_t>(groups) : w.row_stride;
            const char* p0 = static_cast<const char*>(w.packed ? w.packed : w.data) +
                             static_cast<size_t>(w.packed ? r / kq::kPackRows : r) * bytes;
            const int64_t next = w.packed ? 1 : 4;  // the second stream: the next group, the next row tile
            const char* p1 = (r + (w.packed ? kq::kPackRows : 4) < w.n_out) ? p0 + next * bytes : nullptr;
            for (size_t o = 0; o < std::min<size_t>(bytes, 2048); o += 64) {
                __builtin_prefetch(p0 + o);
                if (p1) __builtin_prefetch(p1 + o);
            }
        }
        // Blocks [b0, b1) of token t of input j into a.
        void quantize(size_t j, int64_t t, int64_t b0, int64_t b1, ActQ& a) const {
            quantize_in(in[j].m, in[j].width, t, b0, b1, a);
        }
        // Input j, by this thread alone, into its own buffer.
        void quantize_input(size_t j, ActQ& a) const {
            a.reserve(in[j].width, in[j].T);
            for (int64_t t = 0; t < in[j].T; ++t) quantize(j, t, 0, a.nb, a);
        }
        // Claims quantization chunks until none are left, then waits for the ones other
        // threads claimed. A claimed chunk is always being done by a running thread that
        // waits for nothing before it finishes it, so this never deadlocks, however the
        // pool hands out the tasks.
        void quantize_shared() {
            size_t j = 0;
            for (int64_t i; (i = q_next.fetch_add(1, std::memory_order_relaxed)) < n_q;) {
                while (j + 1 < n_in && i >= in[j + 1].q0) ++j;  // a thread's claims only increase
                const In& s = in[j];
                const int64_t c = i - s.q0, t = c / s.q_per_tok, b0 = c % s.q_per_tok * kQuantBlocks;
                quantize(j, t, b0, std::min(shared[j].nb, b0 + kQuantBlocks), shared[j]);
                q_done.fetch_add(1, std::memory_order_release);
            }
            // A claim takes about a microsecond; past that, the thread that holds one may
            // have lost its core (more threads than cores), so give the core away.
            for (int spins = 0; q_done.load(std::memory_order_acquire) < n_q; ++spins)
                if (spins < 2000) cpu_relax();
                else std::this_thread::yield();
        }
    };
    thread_local Ctx c;
    c.n_in = ins.size();
    c.n = outs.size();
    c.outs = outs.data();
    c.unit = 16;
    // Per input: its width, and whether every weight reading it is packed Q8_0 (path_for).
    bool packed_q8[kMaxOuts];
    std::fill_n(packed_q8, ins.size(), true);
    for (size_t i = 0; i < outs.size(); ++i) {
        const auto j = static_cast<size_t>(in_of[i]);
        c.in[j].width = outs[i].w.n_in;
        packed_q8[j] = packed_q8[j] && outs[i].w.packed && outs[i].w.type == GgmlType::Q8_0;
    }
    int64_t q = 0, rows_in = 0;
    void (*fn_of[kMaxOuts])(const kq::Job&, int64_t, int64_t);  // the path of each input's T
    for (size_t j = 0; j < ins.size(); ++j) {
        Ctx::In& in = c.in[j];
        in.m = ins[j];
        in.T = ins[j].T;
        in.q_per_tok = ((in.width + 31) / 32 + kQuantBlocks - 1) / kQuantBlocks;
        in.q0 = q;
        q += in.T * in.q_per_tok;
        rows_in += in.T;
        fn_of[j] = rows_fn(path_for(ins[j].T, packed_q8[j]));
    }
    c.n_q = q;
    c.q_next.store(0, std::memory_order_relaxed);
    c.q_done.store(0, std::memory_order_relaxed);
    c.self = self_quantize(pool.size(), rows_in);
    c.shared = acts;
    if (!c.self)
        for (size_t j = 0; j < ins.size(); ++j) acts[j].reserve(c.in[j].width, c.in[j].T);
    for (size_t i = 0; i < outs.size(); ++i) {
        c.in_of[i] = in_of[i];
        c.fn[i] = fn_of[in_of[i]];
    }
    for (const MatOut& o : outs)
        if (o.w.packed) c.unit = 2 * kq::kPackRows;  // decode reads packed groups two at a time
    c.first[0] = 0;
    for (size_t i = 0; i < c.n; ++i) c.first[i + 1] = c.first[i] + (outs[i].w.n_out + c.unit - 1) / c.unit;
    // Each thread gets one contiguous share of the rows (one run of memory per weight,
    // which is what the memory system streams best), the same share on every call, claimed
    // from the front in shrinking chunks; a thread done with its share takes single units
    // from the back of the share with the most left. Which thread computes a row never
    // changes the row's result.
    const int64_t total = c.first[c.n];
    c.n_shares = static_cast<int>(std::min<int64_t>({pool.size(), kMaxShares, total}));
    for (int k = 0; k < c.n_shares; ++k) c.shares[k].set(total * k / c.n_shares, total * (k + 1) / c.n_shares);
    const auto body = [p = &c](int k) {
        if (k < p->n_shares) p->prime(p->shares[k].front_now());
        // Self-quantized: each input into this thread's own buffers when its rows first
        // read it, so a thread quantizes only the inputs of the rows it takes (a decode
        // step's expert downs: each thread about half of them, and mostly the gate and up
        // outputs it computed itself, not lines the other core wrote). A thread that
        // starts late and finds every row taken quantizes nothing.
        ActQ* a = p->shared;
        uint32_t ready = 0;
        uint32_t* lazy = nullptr;
        if (p->self) {
            a = acts;
            lazy = &ready;
        } else {
            p->quantize_shared();
        }
        int64_t u0, u1;
        if (k < p->n_shares) {
            Share& own = p->shares[k];
            while (own.front(own.left() / 4, &u0, &u1)) p->rows(a, u0, u1, lazy);
        }
        for (;;) {
            int best = -1;
            int64_t most = 0;
            for (int j = 0; j < p->n_shares; ++j)
                if (const int64_t l = p->shares[j].left(); l > most) most = l, best = j;
            if (best < 0) return;
            if (p->shares[best].back(&u0)) p->rows(a, u0, u0 + 1, lazy);
        }
    };
    // One unit of rows (a GDN layer's 16-row ba projection) is the caller's alone: waking
    // another thread for it costs more than the product.
    if (c.n_shares == 1) body(0);
    else pool.run_each(body);
}

// Rows [r_begin, r_end) of y for all T tokens, on the calling thread (the f32 path): F32
// read as stored, F16 and BF16 too for up to kWidenRows tokens, the rest dequantized a
// 4-row tile at a time into a buffer.
void f32_rows(const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, int64_t r_begin,
              int64_t r_end) {
    const int64_t n = w.n_in;
    auto tiles = [&]<FloatW W, bool kAhead>(auto rows_of) {
        for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowTile) {
            const int nr = static_cast<int>(std::min<int64_t>(kRowTile, r_end - r0));
            const auto [rows, stride] = rows_of(r0, nr);
            rows_dot<W, kAhead>(rows, stride, nr, n, x, ldx, T, y + r0, ldy);
        }
    };
    auto in_place = [&](int64_t r0, int) { return std::pair<const uint8_t*, size_t>(w.row(r0), w.row_stride); };
    switch (w.type) {
    case GgmlType::F32: return tiles.template operator()<FloatW::F32, true>(in_place);
    // The 16-bit types in registers for a few tokens (decode, verify windows), where the
    // buffer's stores cost more than widening each vector again for each tile of 4
    // tokens; a prompt's rows once into the buffer.
    case GgmlType::BF16:
        if (T <= kWidenRows) return tiles.template operator()<FloatW::BF16, true>(in_place);
        break;
    case GgmlType::F16:
        if constexpr (kF16InRegisters)
            if (T <= kWidenRows && simd::vector_bits() >= 256) return tiles.template operator()<FloatW::F16, true>(in_place);
        break;
    default: break;
    }
    thread_local std::vector<float> buf;
    if (buf.size() < static_cast<size_t>(kRowTile * n)) buf.resize(static_cast<size_t>(kRowTile * n));
    tiles.template operator()<FloatW::F32, false>([&](int64_t r0, int nr) {
        for (int r = 0; r < nr; ++r) dequantize_row(w.type, w.row(r0 + r), buf.data() + r * n, n);
        return std::pair<const uint8_t*, size_t>(reinterpret_cast<const uint8_t*>(buf.data()), sizeof(float) * static_cast<size_t>(n));
    });
}

void matmul_f32(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
                int64_t ldy) {
    const int64_t n_tasks = (w.n_out + kRowsPerTask - 1) / kRowsPerTask;
    pool.run(n_tasks, [&](int64_t task) {
        f32_rows(w, x, ldx, T, y, ldy, task * kRowsPerTask, std::min(w.n_out, (task + 1) * kRowsPerTask));
    });
}

// The gathered or gated form of x written out as plain rows (the f32 path reads those),
// into buf; x itself when it is plain.
MatIn plain_rows(const MatIn& x, int64_t width, std::vector<float>& buf) {
    if (x.plain()) return x;
    buf.resize(static_cast<size_t>(x.T * width));
    for (int64_t t = 0; t < x.T; ++t) {
        float* r = buf.data() + t * width;
        if (x.gate) ops::swiglu(x.gate_row(t), x.row(t), width, r);
        else std::copy(x.row(t), x.row(t) + width, r);
    }
    return {buf.data(), width, x.T};
}

}  // namespace

const char* int_decode_path_name(GgmlType type) {
    return kq::supported(type) ? kq::name(path_for(1, type == GgmlType::Q8_0)) : "none (f32 path)";
}

void matmul_grouped(ThreadPool& pool, std::span<const MatIn> ins, std::span<const MatOut> outs, std::span<const int> in_of) {
    STRATA_CHECK(in_of.size() == outs.size(), "matmul: {} inputs named for {} outputs", in_of.size(), outs.size());
    thread_local std::vector<int64_t> width;  // per input: the n_in of the weights reading it (0: none yet)
    width.assign(ins.size(), 0);
    for (size_t i = 0; i < outs.size(); ++i) {
        const MatOut& o = outs[i];
        STRATA_CHECK(in_of[i] >= 0 && static_cast<size_t>(in_of[i]) < ins.size(), "matmul: output {} reads input {} of {}",
                     i, in_of[i], ins.size());
        const MatIn& x = ins[static_cast<size_t>(in_of[i])];
        STRATA_CHECK(o.w.n_in > 0 && o.w.n_out > 0, "matmul: empty weight {}x{}", o.w.n_out, o.w.n_in);
        STRATA_CHECK(x.ldx >= o.w.n_in && o.ldy >= o.w.n_out, "matmul: strides {} / {} too small", x.ldx, o.ldy);
        int64_t& n_in = width[static_cast<size_t>(in_of[i])];
        STRATA_CHECK(n_in == 0 || n_in == o.w.n_in, "matmul: weights with {} and {} inputs read one x", n_in, o.w.n_in);
        n_in = o.w.n_in;
    }
    // The integer path in runs of up to kMaxOuts outputs (with their inputs, renumbered);
    // the f32 path one output at a time.
    thread_local std::vector<MatIn> run_in;
    thread_local std::vector<MatOut> run_out;
    thread_local std::vector<int> run_of, map;
    run_in.clear();
    run_out.clear();
    run_of.clear();
    map.assign(ins.size(), -1);
    auto flush = [&] {
        if (!run_out.empty()) matmul_q(pool, run_in, run_out, run_of);
        run_in.clear();
        run_out.clear();
        run_of.clear();
        std::fill(map.begin(), map.end(), -1);
    };
    for (size_t i = 0; i < outs.size(); ++i) {
        const MatOut& o = outs[i];
        const auto j = static_cast<size_t>(in_of[i]);
        const MatIn& x = ins[j];
        if (x.T <= 0) continue;
        if (!kq::supported(o.w.type)) {
            thread_local std::vector<float> buf;
            const MatIn p = plain_rows(x, o.w.n_in, buf);
            matmul_f32(pool, o.w, p.x, p.ldx, p.T, o.y, o.ldy);
            continue;
        }
        if (run_out.size() == kMaxOuts || (map[j] < 0 && run_in.size() == kMaxOuts)) flush();
        if (map[j] < 0) {
            map[j] = static_cast<int>(run_in.size());
            run_in.push_back(x);
        }
        run_out.push_back(o);
        run_of.push_back(map[j]);
    }
    flush();
}

void matmul_here(const MatIn& x, std::span<const MatOut> outs, ActQ& a) {
    if (x.T <= 0) return;
    int64_t width = 0;  // of the quantized x (0: not yet)
    for (const MatOut& o : outs) {
        if (!kq::supported(o.w.type)) {
            thread_local std::vector<float> buf;
            const MatIn p = plain_rows(x, o.w.n_in, buf);
            f32_rows(o.w, p.x, p.ldx, p.T, o.y, o.ldy, 0, o.w.n_out);
            continue;
        }
        if (width == 0) {
            width = o.w.n_in;
            a.reserve(width, x.T);
            for (int64_t t = 0; t < x.T; ++t) quantize_in(x, width, t, 0, a.nb, a);
        }
        STRATA_CHECK(o.w.n_in == width, "matmul: weights with {} and {} inputs read one x", width, o.w.n_in);
        rows_fn(path_for(x.T, o.w.packed && o.w.type == GgmlType::Q8_0))({&o.w, &a, o.y, o.ldy}, 0, o.w.n_out);
    }
}

void matmul_multi(ThreadPool& pool, std::span<const MatOut> outs, const float* x, int64_t ldx, int64_t T) {
    if (outs.empty()) return;
    for (const MatOut& o : outs)
        STRATA_CHECK(o.w.n_in == outs[0].w.n_in, "matmul: weights with {} and {} inputs", o.w.n_in, outs[0].w.n_in);
    const MatIn in{x, ldx, T};
    thread_local std::vector<int> zeros;
    zeros.assign(outs.size(), 0);
    matmul_grouped(pool, std::span<const MatIn>(&in, 1), outs, zeros);
}

void matmul(ThreadPool& pool, const MatView& w, const float* x, int64_t ldx, int64_t T, float* y,
            int64_t ldy) {
    const MatOut o{w, y, ldy};
    matmul_multi(pool, std::span<const MatOut>(&o, 1), x, ldx, T);
}

void matmul_ref(const MatView& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy) {
    std::vector<float> row(static_cast<size_t>(w.n_in));
    for (int64_t r = 0; r < w.n_out; ++r) {
        dequantize_row(w.type, w.row(r), row.data(), w.n_in);
        for (int64_t t = 0; t < T; ++t) {
            double s = 0;
            for (int64_t i = 0; i < w.n_in; ++i) s += static_cast<double>(row[i]) * x[t * ldx + i];
            y[t * ldy + r] = static_cast<float>(s);
        }
    }
}

}  // namespace strata
