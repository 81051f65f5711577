// Products of quantized weights with activations quantized to integers, by integer dot
// products of four bytes (dp4a; a portable form where the GPU lacks it): the decode path.
//
// Activations (quantize_act): per row, blocks of 32 values as kernels/cpu/act_quant.h
// makes them on the CPU: two int8 digits per value, x ~ d * (128 q + r), one f32 d per
// block. One digit alone costs ~0.5% per product; the second brings it to ~0.005% for one
// more dp4a per four values, which a kernel bound by reading the weights does not notice.
//
// Weights: one warp per output row (kOuts rows for prompts), its lanes taking the row's
// 32-value chunks in turn (chunk c is lane c % warpSize), each decoded once
// (int_decode.cuh, in two 16-value halves) for up to kRows (or kPromptRows) rows of x; then
// the lanes' partial sums are added in a fixed tree. A prompt's warp reads each chunk of x once for its
// kOuts output rows (the loads, not the integer products, bound a many-row call). An
// output of a row of x is summed in the same order whatever rows and outputs share the
// warp or the launch, so one row of a many-row call equals that row alone (the GPU's
// greedy determinism across decode, verify and prompt windows).
#include <algorithm>

#include "engine/core/error.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/int_decode.cuh"
#include "kernels/cuda/fused.cuh"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;
// Rows of x per weight pass: a verify window of 1 + K <= 8 reads the weights once; a
// prompt 16 rows at a time, for kOuts output rows per warp (32 accumulators per lane, as
// 32 rows of one output had: more overflowed HIP-CPU's 7 KiB fiber stacks, and what a
// real GPU prefers is for a card to measure). A row's arithmetic is the same in all
// (acc[o][r] alone).
constexpr int kRows = 8, kPromptRows = 16, kOuts = 2;

// a . b over four int8 lanes, plus c.
STRATA_DEV int dot4(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
    return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#elif defined(__HIP_DEVICE_COMPILE__) &&                                                                         \
    (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) ||                 \
     defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1030__) || defined(__gfx1031__) ||               \
     defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__))
    return __builtin_amdgcn_sdot4(static_cast<int>(a), static_cast<int>(b), c, false);
#else
    for (int i = 0; i < 4; ++i) c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
    return c;
#endif
}

// 32 threads per 32-value block of a row of x, one value each (act_quant.cuh). A thread
// per block made a decode step's row 64 threads of 32 dependent loads each.
__global__ void quantize_act_k(Rows x, ActQ a) {
    const ValueSlot v = value_slot(a);
    quant_value(x.p[v.t * x.ld + 32 * v.b + v.k], v.k, v.in, a, v.t, v.b);
}

// Whether T's ws and wm are the same for both 16-value halves of a 32-value chunk: the
// halves' integer sums then take one float scaling. (Not so where a format scales each
// 16 values: Q2_K, Q3_K, Q6_K, IQ2_XS, IQ2_S, IQ1_M; tests/gpu's products would catch a
// format put in the wrong set.)
template <GgmlType T>
inline constexpr bool kChunkScale = !(T == GgmlType::Q2_K || T == GgmlType::Q3_K || T == GgmlType::Q6_K ||
                                      T == GgmlType::IQ2_XS || T == GgmlType::IQ2_S || T == GgmlType::IQ1_M);

// Chunk c (values 32c .. 32c + 31) of weight rows w[0 .. no - 1] against rows row_of(0) ..
// row_of(nr - 1) of x (no <= O, nr <= R): acc[o][r] += that product. A lane takes a whole
// chunk: its block's header and scales are decoded once for its 32 values, and x's digits
// come in 16-byte loads (a 16-value unit per lane spent more instructions on indices and
// scales than on the products: the card profiled the kernel as bound by issue, not by
// DRAM). The x digits of a row are loaded once for the O weight rows; each (o, r) takes
// the same operations as with O = 1, whichever rows of x come.
// A16: the weight rows' addresses and stride are multiples of 16 (decode16a's loads).
template <GgmlType T, int R, int O, bool A16, typename RowOf>
STRATA_DEV void chunk_dot(const uint8_t* const* w, int no, int c, const ActQ& x, RowOf row_of, int nr,
                          float (*acc)[R], const IqTables& tab) {
    constexpr int per_block = BlockInfo<T>::values / 32;
    const int j = c % per_block;
    uint32_t wq[O][8];
    float ws[O][2], wm[O][2];
    for (int o = 0; o < O; ++o) {
        if (o >= no) break;
        const uint8_t* blk = w[o] + static_cast<size_t>(c / per_block) * BlockInfo<T>::bytes;
        for (int h = 0; h < 2; ++h) {
            if constexpr (A16)
                decode16a<T>(blk, j, h, wq[o] + 4 * h, &ws[o][h], &wm[o][h], tab);
            else
                decode16<T>(blk, j, h, wq[o] + 4 * h, &ws[o][h], &wm[o][h], tab);
        }
    }
    const int64_t nb = x.n / 32;
    for (int r = 0; r < R; ++r) {
        if (r >= nr) break;
        const int64_t t = row_of(r);
        // x's parts are 16-byte aligned (act_q_bytes pads them to 256 bytes; rows are
        // multiples of 32 values), its sums 8-byte aligned.
        const auto* xq = reinterpret_cast<const uint8_t*>(x.q + t * x.n + 32 * c);
        const auto* xr = reinterpret_cast<const uint8_t*>(x.r + t * x.n + 32 * c);
        uint32_t q[8], rr[8];
        int_detail::ld128<16>(xq, q);
        int_detail::ld128<16>(xq + 16, q + 4);
        int_detail::ld128<16>(xr, rr);
        int_detail::ld128<16>(xr + 16, rr + 4);
        const float d = x.d[t * nb + c];
        int2 xs = make_int2(0, 0);
        if constexpr (kHasMin<T>) xs = reinterpret_cast<const int2*>(x.s)[t * nb + c];
        for (int o = 0; o < O; ++o) {
            if (o >= no) break;
            int pq[2] = {0, 0}, pr[2] = {0, 0};
            for (int h = 0; h < 2; ++h)
                for (int k = 0; k < 4; ++k) {
                    pq[h] = dot4(wq[o][4 * h + k], q[4 * h + k], pq[h]);
                    pr[h] = dot4(wq[o][4 * h + k], rr[4 * h + k], pr[h]);
                }
            // Explicit fmaf: the same roundings in every instantiation, whatever a compiler
            // would contract.
            float f;
            if constexpr (kChunkScale<T>) {
                f = ws[o][0] * static_cast<float>(128 * (pq[0] + pq[1]) + (pr[0] + pr[1]));
                if constexpr (kHasMin<T>) f = fmaf(-wm[o][0], static_cast<float>(xs.x + xs.y), f);
            } else {
                f = ws[o][0] * static_cast<float>(128 * pq[0] + pr[0]);
                if constexpr (kHasMin<T>) f = fmaf(-wm[o][0], static_cast<float>(xs.x), f);
                f = fmaf(ws[o][1], static_cast<float>(128 * pq[1] + pr[1]), f);
                if constexpr (kHasMin<T>) f = fmaf(-wm[o][1], static_cast<float>(xs.y), f);
            }
            acc[o][r] = fmaf(d, f, acc[o][r]);
        }
    }
}

// Rows at base, stride apart, all 16-byte aligned (decode16a's loads), on either side.
STRATA_DEV_HOST bool rows16(const void* base, size_t stride) {
    return ((reinterpret_cast<uintptr_t>(base) | stride) & 15u) == 0;
}

// Whether rows at base, stride apart, take decode16a (only formats it reads otherwise).
template <GgmlType T>
STRATA_DEV bool aligned16(const void* base, size_t stride) {
    if constexpr (!kAligned<T>) return false;
    return rows16(base, stride);
}

// The weights of one launch of matmul_q_k: weight i takes blocks block0[i] .. block0[i + 1]
// - 1 of the grid's x (so no block is idle: a k or v has fewer rows than its q), and a
// block's fields are picked by pick(): arrays indexed by a value known only at run time
// would be copied to each thread's stack, where picks are selects of the launch's
// constants. Unused entries are zero, their block0 past every block (the launch's bytes
// are its key in a graph; no padding either).
struct MultiQ {
    const uint8_t* data[kMultiMax];
    float* y[kMultiMax];
    int64_t n_out[kMultiMax];
    int64_t ld[kMultiMax];
    uint64_t stride[kMultiMax];
    uint32_t block0[kMultiMax];
    int64_t n_in;
};
static_assert(sizeof(MultiQ) == 8 * (5 * kMultiMax + 1) + 4 * kMultiMax, "no padding in kernel arguments");

template <typename V, int N>
STRATA_DEV V pick(const V (&a)[N], int z) {
    V v = a[0];
    for (int i = 1; i < N; ++i) v = z == i ? a[i] : v;
    return v;
}

// O output rows per warp (the last warp may have fewer), R rows of x per block row.
// Stay: a warp past the outputs does not return (it computes nothing and stores nothing)
// but takes the same shuffles, for a kernel whose blocks meet at barriers afterwards (a
// CPU HIP runtime makes each shuffle a barrier of the whole block).
template <GgmlType T, int R, int O, bool A16, bool Stay>
STRATA_DEV void product_rows(const MultiQ& m, const ActQ& x, const IqTables& tab) {
    int z = 0;
    for (int i = 1; i < kMultiMax; ++i) z += blockIdx.x >= m.block0[i];
    const int64_t n_out = pick(m.n_out, z);
    const int64_t bx = blockIdx.x - pick(m.block0, z);
    const int lane = static_cast<int>(threadIdx.x) % warpSize;
    const int64_t o0 = (bx * (blockDim.x / warpSize) + threadIdx.x / warpSize) * O;
    const bool live = o0 < n_out;
    if (!Stay && !live) return;  // the whole warp
    const int no = !live ? 0 : static_cast<int>(n_out - o0 < O ? n_out - o0 : O);
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * R;
    const int nr = static_cast<int>(x.rows - t0 < R ? x.rows - t0 : R);
    const uint8_t* data = pick(m.data, z);
    const uint64_t stride = pick(m.stride, z);
    const uint8_t* rows[O];
    for (int o = 0; o < O; ++o) rows[o] = data + (o < no ? o0 + o : 0) * stride;
    float acc[O][R] = {};
    const auto row_of = [t0](int r) { return t0 + r; };
    const int64_t chunks = live ? m.n_in / 32 : 0;
    if constexpr (R == 1) {  // decode: two chunks' loads in flight (a 2048-wide row is two rounds)
        STRATA_UNROLL(2)
        for (int c = lane; c < chunks; c += warpSize) chunk_dot<T, R, O, A16>(rows, no, c, x, row_of, nr, acc, tab);
    } else {
        for (int c = lane; c < chunks; c += warpSize) chunk_dot<T, R, O, A16>(rows, no, c, x, row_of, nr, acc, tab);
    }
    float* y = pick(m.y, z);
    const int64_t ld = pick(m.ld, z);
    // Every live warp of a block sums all O outputs (the missing ones are zeros): a CPU HIP
    // runtime makes each shuffle a barrier of the whole block, and warps that took
    // different numbers of them there left its fibers out of step for the blocks after.
    for (int o = 0; o < O; ++o)
        for (int r = 0; r < R; ++r) {
            if (r >= nr) break;  // the same in every warp of the block
            const float s = warp_sum(acc[o][r]);
            if (lane == 0 && o < no) y[(t0 + r) * ld + o0 + o] = s;
        }
}

template <GgmlType T, int R, int O, bool A16>
__global__ void matmul_q_k(MultiQ m, ActQ x, IqTables tab) {
    product_rows<T, R, O, A16, false>(m, x, tab);
}

// matmul_add_rms_norm_q's: h += y, then rms_norm(h) * w into out with its digits q.
struct AddNorm {
    Rows h;
    const float* w;
    float eps;
    uint32_t unused;
    Rows out;
    ActQ q;
    unsigned* counters;  // x.rows, 0 between launches
};
static_assert(sizeof(AddNorm) == 2 * sizeof(Rows) + sizeof(ActQ) + 24, "no padding in kernel arguments");

// m's one weight times R rows of x per block row (blockIdx.y), as matmul_q_k takes them
// (one row: a decode step; kRows: a verify window, its weights read once for all its
// rows), then the last of a block row's blocks to finish runs add_rms_norm_q's block for
// each of its rows in turn (norm_q_row, in a block of rows::kNormThreads threads: the same
// sums).
template <GgmlType T, int R, bool A16>
__global__ void __launch_bounds__(rows::kNormThreads, 1) matmul_q_norm_k(MultiQ m, ActQ x, IqTables tab, AddNorm an) {
    __shared__ unsigned done;
    __shared__ float red[32];
    product_rows<T, R, 1, A16, true>(m, x, tab);
    if (!last_to_finish(an.counters + blockIdx.y, gridDim.x, done)) return;
    const Rows y{m.y[0], m.n_out[0], x.rows, m.ld[0]};
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * R;
    for (int64_t t = t0; t < t0 + R && t < x.rows; ++t)
        norm_q_row<Addend::Rows>(an.h, y, MoeCombine{}, Rows{}, an.w, an.eps, an.out, an.q, t, red);
}

static_assert(sizeof(IdsExtra) == 5 * 8, "no padding in kernel arguments");

// Row i's outputs of table z (0: w, 1: w2): y (y2), or the shared rows' ex.y (ex.y2).
STRATA_DEV float* ids_out(const Rows& y, float* y2, const IdsExtra& ex, int64_t i, unsigned z) {
    const bool routed = ex.n_ids < 0 || i < ex.n_ids;
    const int64_t at = (routed ? i : i - ex.n_ids) * y.ld;
    return (z == 0 ? (routed ? y.p : ex.y) : (routed ? y2 : ex.y2)) + at;
}

// A warp's output of row blockIdx.y and table blockIdx.z (matmul_ids_q_k's product). Stay:
// a warp past the outputs, or of an expert computed elsewhere, stays (for barriers after).
template <GgmlType T, bool Stay>
STRATA_DEV void ids_product(const uint8_t* const* w, const uint8_t* const* w2, int64_t n_in, int64_t n_out,
                            size_t stride, const int32_t* ids, int64_t div, const ActQ& x, const Rows& y, float* y2,
                            const IqTables& tab, const IdsExtra& ex) {
    const int lane = static_cast<int>(threadIdx.x) % warpSize;
    const int64_t ow = static_cast<int64_t>(blockIdx.x) * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    const int64_t i = blockIdx.y;
    if (!Stay && ow >= n_out) return;
    const bool has = ow < n_out;
    const int64_t o = has ? ow : n_out - 1;
    const bool routed = ex.n_ids < 0 || i < ex.n_ids;
    if (blockIdx.z == 1) w = w2;
    const uint8_t* we = w[routed ? ids[i] : ex.id];
    if (we == nullptr) return;  // an expert computed elsewhere: its row of y stays as it is (the whole block)
    const uint8_t* row[1] = {we + o * stride};
    float acc[1][1] = {};
    const int64_t xr = routed ? i / div : ex.x0 + (i - ex.n_ids);
    const auto row_of = [xr](int) { return xr; };
    if (aligned16<T>(we, stride)) {
        STRATA_UNROLL(2)
        for (int c = lane; c < n_in / 32; c += warpSize) chunk_dot<T, 1, 1, true>(row, 1, c, x, row_of, 1, acc, tab);
    } else {
        STRATA_UNROLL(2)
        for (int c = lane; c < n_in / 32; c += warpSize) chunk_dot<T, 1, 1, false>(row, 1, c, x, row_of, 1, acc, tab);
    }
    const float s = warp_sum(acc[0][0]);
    if (lane == 0 && has) ids_out(y, y2, ex, i, blockIdx.z)[o] = s;
}

// Expert tables by blockIdx.z: w, or w2 with its output y2 (y's rows and ld). Rows from
// ex.n_ids on: the shared expert's (IdsExtra).
// Swiglu (w2 given): the SwiGLU of the two outputs (gate, up) into y, quantized into sw.a,
// by the last of the blocks of each 32 outputs of a row to finish (both tables' blocks:
// they count themselves in sw.counters, fenced after their stores), a warp's work, so
// that the launch replaces swiglu_q's. Every block then stays to the end (a warp past
// the outputs computes the last one again and stores nothing), since the block meets at
// barriers and a CPU HIP runtime's shuffles wait for the whole block.
struct IdsSwiglu {
    ActQ a;
    unsigned* counters;  // y.rows x n_out / 32, 0 between launches
};
static_assert(sizeof(IdsSwiglu) == sizeof(ActQ) + 8, "no padding in kernel arguments");
template <GgmlType T, bool Swiglu = false>
__global__ void matmul_ids_q_k(const uint8_t* const* w, const uint8_t* const* w2, int64_t n_in, int64_t n_out,
                               size_t stride, const int32_t* ids, int64_t div, ActQ x, Rows y, float* y2,
                               IqTables tab, IdsExtra ex, IdsSwiglu sw) {
    ids_product<T, Swiglu>(w, w2, n_in, n_out, stride, ids, div, x, y, y2, tab, ex);
    if constexpr (Swiglu) {
        __shared__ unsigned done;
        const int64_t i = blockIdx.y;
        const int64_t per = blockDim.x / warpSize, b = blockIdx.x * per / 32;  // its 32 outputs
        if (!last_to_finish(sw.counters + i * (n_out / 32) + b, static_cast<unsigned>(2 * (32 / per)), done)) return;
        const int k = static_cast<int>(threadIdx.x % 32);
        swiglu_q_value(ids_out(y, y2, ex, i, 0), ids_out(y, y2, ex, i, 1), ids_out(y, y2, ex, i, 0), k,
                       threadIdx.x < 32, sw.a, i, b);
    }
}

// matmul_ids_combine_add_rms_norm_q's: the combine of the launch's rows (c.routed: y, a
// token's k rows; c.shared: the shared expert's rows, ex.y) into out, then h += out and
// rms_norm(h) * w into y with its digits q.
struct IdsCombine {
    MoeCombine c;
    Rows out;
    AddNorm an;  // counters: one per token
};
static_assert(sizeof(IdsCombine) == sizeof(MoeCombine) + sizeof(Rows) + sizeof(AddNorm),
              "no padding in kernel arguments");

// matmul_ids_q_k's product (one table, blocks of rows::kNormThreads threads), then the
// last of a token's blocks (its k routed rows' and its shared row's) runs
// moe_combine_add_rms_norm_q's block for the token (norm_q_row: the same sums).
template <GgmlType T>
__global__ void __launch_bounds__(rows::kNormThreads, 1) matmul_ids_combine_k(const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                                     const int32_t* ids, ActQ x, Rows y, IqTables tab, IdsExtra ex, IdsCombine cb) {
    __shared__ unsigned done;
    __shared__ float red[32];
    ids_product<T, true>(w, nullptr, n_in, n_out, stride, ids, 1, x, y, nullptr, tab, ex);
    const int64_t i = blockIdx.y;
    const bool routed = ex.n_ids < 0 || i < ex.n_ids;
    const int64_t t = routed ? i / cb.c.k : i - ex.n_ids;
    const auto blocks = static_cast<unsigned>((cb.c.k + (ex.n_ids >= 0 ? 1 : 0)) * gridDim.x);
    if (!last_to_finish(cb.an.counters + t, blocks, done)) return;
    norm_q_row<Addend::Combine>(cb.an.h, Rows{}, cb.c, cb.out, cb.an.w, cb.an.eps, cb.an.out, cb.an.q, t, red);
}

// The rows of ids by expert: rows offsets[e] .. offsets[e + 1] - 1 of order are the i with
// ids[i] == e, in no fixed order (each row's sums are its own: the order changes no
// result). One block; cursor: n_expert ints of scratch.
__global__ void group_ids_k(const int32_t* ids, int64_t n, int64_t n_expert, int32_t* offsets, int32_t* cursor,
                            int32_t* order) {
    for (int64_t e = threadIdx.x; e <= n_expert; e += blockDim.x) offsets[e] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const int32_t e = ids[i];
        if (e >= 0 && e < n_expert) atomicAdd(&offsets[e + 1], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int64_t e = 0; e < n_expert; ++e) offsets[e + 1] += offsets[e];
    __syncthreads();
    for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x) cursor[e] = offsets[e];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const int32_t e = ids[i];
        if (e >= 0 && e < n_expert) order[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
    }
}

// matmul_ids_q_k expert by expert: block (output block, e) takes expert e's rows kRows at a
// time, so its weights are read once per window, not once per row routed to it. A row's
// sums are matmul_ids_q_k's, operation for operation.
template <GgmlType T>
__global__ void matmul_grouped_q_k(const uint8_t* const* w, const uint8_t* const* w2, int64_t n_in, int64_t n_out,
                                   size_t stride, const int32_t* offsets, const int32_t* order, int64_t div, ActQ x,
                                   Rows y, float* y2, IqTables tab) {
    const int lane = static_cast<int>(threadIdx.x) % warpSize;
    const int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    const int64_t e = blockIdx.y;
    if (o >= n_out) return;
    if (blockIdx.z == 1) w = w2, y.p = y2;
    const uint8_t* we = w[e];
    if (we == nullptr) return;  // an expert computed elsewhere: its rows of y stay as they are
    const uint8_t* row[1] = {we + o * stride};
    const int32_t r1 = offsets[e + 1];
    for (int32_t b = offsets[e]; b < r1; b += kRows) {
        const int nr = static_cast<int>(r1 - b < kRows ? r1 - b : kRows);
        const int32_t* rows = order + b;
        const auto row_of = [rows, div](int r) { return static_cast<int64_t>(rows[r]) / div; };
        float acc[1][kRows] = {};
        if (aligned16<T>(we, stride))
            for (int c = lane; c < n_in / 32; c += warpSize)
                chunk_dot<T, kRows, 1, true>(row, 1, c, x, row_of, nr, acc, tab);
        else
            for (int c = lane; c < n_in / 32; c += warpSize)
                chunk_dot<T, kRows, 1, false>(row, 1, c, x, row_of, nr, acc, tab);
        for (int r = 0; r < kRows; ++r) {
            if (r >= nr) break;
            const float s = warp_sum(acc[0][r]);
            if (lane == 0) y.p[static_cast<int64_t>(rows[r]) * y.ld + o] = s;
        }
    }
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

// Blocks of `threads` threads for n_out output rows, `outs` per warp.
unsigned out_blocks(int64_t n_out, int outs = 1, int threads = kThreads) {
    const int64_t per = threads / warp_size() * outs;
    return static_cast<unsigned>((n_out + per - 1) / per);
}

}  // namespace

bool int_dot(GgmlType type) { return dispatch_quant(type, NoKernel{}); }

size_t act_q_bytes(int64_t n, int64_t rows) {
    const size_t v = static_cast<size_t>(n * rows);
    return 2 * ((v + 255) / 256 * 256) + static_cast<size_t>(n / 32 * rows) * sizeof(float) +
           static_cast<size_t>(n / 16 * rows) * sizeof(int32_t);
}

ActQ act_q_layout(void* scratch, int64_t n, int64_t rows) { return act_q_at(scratch, n, rows); }

ActQ quantize_act(Rows x, void* scratch, Stream s) {
    STRATA_CHECK(x.cols % 32 == 0, "quantize_act: {} values per row, not a multiple of 32", x.cols);
    const ActQ a = act_q_at(scratch, x.cols, x.rows);
    const int64_t values = x.rows * x.cols;  // a thread each
    if (values == 0) return a;
    launch(quantize_act_k, dim3(static_cast<unsigned>((values + kThreads - 1) / kThreads)), dim3(kThreads), st(s), x,
           a);
    check_launch("quantize_act");
    return a;
}

bool multi_fits(const Weight& first, const Weight& w) {
    return w.type == first.type && w.n_in == first.n_in && rows16(w.data, w.stride) == rows16(first.data, first.stride);
}

void matmul_q(const Weight& w, const ActQ& x, Rows y, const IqTables& tab, Stream s) {
    matmul_q_multi(std::span<const Weight>(&w, 1), std::span<const Rows>(&y, 1), x, tab, s);
}

namespace {

// go<A16>() with A16: whether w's rows take decode16a's aligned loads (aligned16).
template <GgmlType T, typename F>
void by_alignment(const Weight& w, F&& go) {
    if constexpr (kAligned<T>) {
        if (rows16(w.data, w.stride)) return go.template operator()<true>();
    }
    go.template operator()<false>();
}

// The launch arguments of ws against x; returns the grid's blocks along x (0: no work).
unsigned multi_q(std::span<const Weight> ws, std::span<const Rows> ys, const ActQ& x, int outs, int threads,
                 MultiQ& m) {
    STRATA_CHECK(!ws.empty() && ws.size() <= kMultiMax && ys.size() == ws.size(), "matmul_q: {} weights in one launch",
                 ws.size());
    m = MultiQ{};
    m.n_in = ws[0].n_in;
    unsigned blocks = 0;
    for (size_t i = 0; i < kMultiMax; ++i) {
        m.block0[i] = blocks;
        if (i >= ws.size()) {
            m.block0[i] = UINT32_MAX;
            continue;
        }
        STRATA_CHECK(((reinterpret_cast<uintptr_t>(ws[i].data) | ws[i].stride) & 1) == 0 && ws[i].n_in == x.n &&
                         multi_fits(ws[0], ws[i]),
                     "matmul_q: a weight at an odd address or of another width or type");
        m.data[i] = ws[i].data, m.y[i] = ys[i].p, m.n_out[i] = ws[i].n_out, m.ld[i] = ys[i].ld;
        m.stride[i] = ws[i].stride;
        blocks += out_blocks(ws[i].n_out, outs, threads);
    }
    return x.rows == 0 ? 0 : blocks;
}

}  // namespace

void matmul_q_multi(std::span<const Weight> ws, std::span<const Rows> ys, const ActQ& x, const IqTables& tab,
                    Stream s) {
    const bool prompt = x.rows > kRows;
    const int rows = prompt ? kPromptRows : kRows, outs = prompt ? kOuts : 1;
    MultiQ m;
    const unsigned blocks = multi_q(ws, ys, x, outs, kThreads, m);
    if (blocks == 0) return;
    const Weight& w = ws[0];
    const dim3 grid(blocks, static_cast<unsigned>((x.rows + rows - 1) / rows));
    const bool ok = dispatch_quant(w.type, [&]<GgmlType T>() {
        // One row (a decode step) has its own kernel: 8 rows' accumulators held registers
        // that limited the warps per SM (the same sums: acc[o][r] alone).
        const auto go = [&]<bool A16>() {
            if (prompt) launch(matmul_q_k<T, kPromptRows, kOuts, A16>, grid, dim3(kThreads), st(s), m, x, tab);
            else if (x.rows == 1) launch(matmul_q_k<T, 1, 1, A16>, grid, dim3(kThreads), st(s), m, x, tab);
            else launch(matmul_q_k<T, kRows, 1, A16>, grid, dim3(kThreads), st(s), m, x, tab);
        };
        by_alignment<T>(w, go);
    });
    if (!ok) fail("matmul: weight type {} has no integer GPU kernel", type_info(w.type).name);
    check_launch("matmul_q");
}

ActQ matmul_add_rms_norm_q(const Weight& w, const ActQ& x, Rows y, Rows h, const float* nw, float eps, Rows out,
                           void* scratch, unsigned* counters, const IqTables& tab, Stream s) {
    STRATA_CHECK(w.n_out % 32 == 0 && y.cols == w.n_out && y.rows == x.rows && h.cols == w.n_out &&
                     h.rows == x.rows && out.cols == w.n_out && out.rows == x.rows && counters,
                 "matmul_add_rms_norm_q: rows of {} values for a product of {} outputs", h.cols, w.n_out);
    STRATA_CHECK(x.rows <= kNormProductRows, "matmul_add_rms_norm_q: {} rows, at most {}", x.rows, kNormProductRows);
    static_assert(kNormProductRows == kRows, "the rows of matmul_q_multi's window kernel");
    const ActQ q = act_q_at(scratch, w.n_out, x.rows);
    MultiQ m;
    const unsigned blocks = multi_q(std::span<const Weight>(&w, 1), std::span<const Rows>(&y, 1), x, 1,
                                    rows::kNormThreads, m);
    if (blocks == 0) return q;
    const dim3 grid(blocks, 1);
    const AddNorm an{h, nw, eps, 0, out, q, counters};
    const bool ok = dispatch_quant(w.type, [&]<GgmlType T>() {
        const auto go = [&]<bool A16>() {
            if (x.rows == 1) launch(matmul_q_norm_k<T, 1, A16>, grid, dim3(rows::kNormThreads), st(s), m, x, tab, an);
            else launch(matmul_q_norm_k<T, kRows, A16>, grid, dim3(rows::kNormThreads), st(s), m, x, tab, an);
        };
        by_alignment<T>(w, go);
    });
    if (!ok) fail("matmul: weight type {} has no integer GPU kernel", type_info(w.type).name);
    check_launch("matmul_add_rms_norm_q");
    return q;
}

namespace {

// matmul_ids_q_k's launch, with the SwiGLU (sw.counters set) or without.
void ids_launch(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                const int32_t* ids, int64_t div, const ActQ& x, Rows y, const IqTables& tab, Stream s,
                const uint8_t* const* w2, float* y2, const IdsExtra& extra, const IdsSwiglu& sw) {
    if (y.rows == 0 || n_out == 0) return;
    STRATA_CHECK(stride % 2 == 0 && n_in == x.n, "moe_experts: expert rows of odd size or another width");
    STRATA_CHECK(extra.n_ids < 0 || (extra.n_ids <= y.rows && extra.y && (!w2 || extra.y2)),
                 "moe_experts: shared expert rows without their outputs");
    const dim3 grid(out_blocks(n_out), static_cast<unsigned>(y.rows), w2 ? 2u : 1u);
    const bool ok = dispatch_quant(type, [&]<GgmlType T>() {
        if (sw.counters)
            launch(matmul_ids_q_k<T, true>, grid, dim3(kThreads), st(s), w, w2, n_in, n_out, stride, ids, div, x, y,
                   y2, tab, extra, sw);
        else
            launch(matmul_ids_q_k<T>, grid, dim3(kThreads), st(s), w, w2, n_in, n_out, stride, ids, div, x, y, y2, tab,
                   extra, sw);
    });
    if (!ok) fail("moe_experts: weight type {} has no integer GPU kernel", type_info(type).name);
    check_launch("moe_experts");
}

}  // namespace

void matmul_ids_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                  const int32_t* ids, int64_t div, const ActQ& x, Rows y, const IqTables& tab, Stream s,
                  const uint8_t* const* w2, float* y2, const IdsExtra& extra) {
    ids_launch(type, w, n_in, n_out, stride, ids, div, x, y, tab, s, w2, y2, extra, IdsSwiglu{});
}

ActQ matmul_ids_swiglu_q(GgmlType type, const uint8_t* const* w, const uint8_t* const* w2, int64_t n_in,
                         int64_t n_out, size_t stride, const int32_t* ids, int64_t div, const ActQ& x, Rows y, float* y2,
                         const IdsExtra& extra, void* scratch, unsigned* counters, const IqTables& tab, Stream s) {
    const int64_t per = kThreads / warp_size();
    STRATA_CHECK(n_out % 32 == 0 && 32 % per == 0 && w2 && y2 && y.cols == n_out && counters,
                 "moe_experts: gate and up of {} outputs for the SwiGLU in their launch", n_out);
    const ActQ a = act_q_at(scratch, n_out, y.rows);
    ids_launch(type, w, n_in, n_out, stride, ids, div, x, y, tab, s, w2, y2, extra, IdsSwiglu{a, counters});
    return a;
}

ActQ matmul_ids_combine_add_rms_norm_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out,
                                       size_t stride, const int32_t* ids, const ActQ& x, Rows y,
                                       const IdsExtra& extra, const MoeCombine& c, Rows out, Rows h, const float* nw,
                                       float eps, Rows norm_out, void* scratch, unsigned* counters,
                                       const IqTables& tab, Stream s) {
    const int64_t T = h.rows;
    const bool shared = extra.n_ids >= 0;
    STRATA_CHECK(n_out % 32 == 0 && n_in == x.n && stride % 2 == 0 && c.k > 0 && y.rows == T * c.k + (shared ? T : 0) &&
                     (!shared || extra.n_ids == T * c.k) && c.routed.p == y.p && c.routed.ld == y.ld &&
                     c.shared.p == (shared ? extra.y : nullptr) && (!shared || c.shared.ld == y.ld) && out.cols == n_out && out.rows == T &&
                     h.cols == n_out && norm_out.cols == n_out && norm_out.rows == T && c.h.rows == T && counters,
                 "matmul_ids_combine_add_rms_norm_q: {} rows of {} outputs for {} tokens of {} experts", y.rows, n_out,
                 T, c.k);
    const ActQ q = act_q_at(scratch, n_out, T);
    if (T == 0) return q;
    const dim3 grid(out_blocks(n_out, 1, rows::kNormThreads), static_cast<unsigned>(y.rows));
    const IdsCombine cb{c, out, AddNorm{h, nw, eps, 0, norm_out, q, counters}};
    const bool ok = dispatch_quant(type, [&]<GgmlType T_>() {
        launch(matmul_ids_combine_k<T_>, grid, dim3(rows::kNormThreads), st(s), w, n_in, n_out, stride, ids, x, y, tab,
               extra, cb);
    });
    if (!ok) fail("moe_experts: weight type {} has no integer GPU kernel", type_info(type).name);
    check_launch("matmul_ids_combine_add_rms_norm_q");
    return q;
}

size_t expert_groups_ints(int64_t n_expert, int64_t n) { return static_cast<size_t>(2 * n_expert + 1 + n); }

ExpertGroups group_ids(const int32_t* ids, int64_t n, int64_t n_expert, int32_t* scratch, Stream s) {
    const ExpertGroups g{scratch, scratch + n_expert + 1 + n_expert, n_expert};
    if (n == 0 || n_expert == 0) return g;
    launch(group_ids_k, dim3(1), dim3(256), st(s), ids, n, n_expert, g.offsets, scratch + n_expert + 1, g.order);
    check_launch("moe_experts (grouping)");
    return g;
}

void matmul_grouped_q(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                      const ExpertGroups& g, int64_t div, const ActQ& x, Rows y, const IqTables& tab, Stream s,
                      const uint8_t* const* w2, float* y2) {
    if (y.rows == 0 || n_out == 0 || g.n_expert == 0) return;
    STRATA_CHECK(stride % 2 == 0 && n_in == x.n, "moe_experts: expert rows of odd size or another width");
    const dim3 grid(out_blocks(n_out), static_cast<unsigned>(g.n_expert), w2 ? 2u : 1u);
    const bool ok = dispatch_quant(type, [&]<GgmlType T>() {
        launch(matmul_grouped_q_k<T>, grid, dim3(kThreads), st(s), w, w2, n_in, n_out, stride, g.offsets, g.order, div,
               x, y, y2, tab);
    });
    if (!ok) fail("moe_experts: weight type {} has no integer GPU kernel", type_info(type).name);
    check_launch("moe_experts");
}

}  // namespace strata::gpu
