// Products with weights in their file's block format, read as they are on the device:
// matmul (float weights: a warp per output; blocks of a quantized format, which the
// integer kernels of matmul_q.cu take in the product: one block per output, up to kRows
// rows of x), the experts' products by id,
// and get_rows. Each thread takes whole 32-value chunks of a weight row in turn, so a
// row's sum is the same sequence of operations whatever else shares the launch: one row
// of a many-row call equals that row alone.
#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/gpu.h"
#include "kernels/cuda/topk.cuh"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kRows = 4;

STRATA_DEV_HOST constexpr bool is_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

STRATA_DEV float load_float(GgmlType t, const uint8_t* row, int64_t i) {
    if (t == GgmlType::F32) {
        float v;
        copy_bytes(&v, row + 4 * i, 4);
        return v;
    }
    const uint16_t h = static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8));
    return t == GgmlType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

// acc[r] += this thread's share of w_row . x_r, r < nr.
template <GgmlType T>
STRATA_DEV void dot_share(const uint8_t* w, int64_t n_in, const float* x, int64_t ldx, int nr, float* acc,
                          const IqTables& tab) {
    if constexpr (is_float(T)) {
        for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) {
            const float v = load_float(T, w, i);
            for (int r = 0; r < kRows; ++r)
                if (r < nr) acc[r] += v * x[r * ldx + i];
        }
    } else {
        constexpr int per_block = BlockInfo<T>::values / 32;
        const int64_t chunks = n_in / 32;
        float v[32];
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            dequant32<T>(w + (c / per_block) * BlockInfo<T>::bytes, static_cast<int>(c % per_block), v, tab);
            for (int r = 0; r < kRows; ++r) {
                if (r >= nr) break;
                const float* xr = x + r * ldx + c * 32;
                float s = 0.0f;
                for (int i = 0; i < 32; ++i) s += v[i] * xr[i];
                acc[r] += s;
            }
        }
    }
}

template <GgmlType T>
__global__ void matmul_k(Weight w, Rows x, Rows y, IqTables tab) {
    __shared__ float red[32];
    const int64_t o = blockIdx.x, r0 = static_cast<int64_t>(blockIdx.y) * kRows;
    const int nr = static_cast<int>(x.rows - r0 < kRows ? x.rows - r0 : kRows);
    float acc[kRows] = {};
    dot_share<T>(w.data + o * w.stride, w.n_in, x.p + r0 * x.ld, x.ld, nr, acc, tab);
    for (int r = 0; r < kRows; ++r) {
        if (r >= nr) break;
        const float s = block_sum(acc[r], red);
        if (threadIdx.x == 0) y.p[(r0 + r) * y.ld + o] = s;
    }
}

// Four float weights from value i of a row (i a multiple of 4): one 16-byte (f32) or
// 8-byte (f16, bf16) load when vec, else value by value; the same values either way.
template <GgmlType T>
STRATA_DEV void load4(const uint8_t* row, int64_t i, bool vec, float* v) {
    if constexpr (T == GgmlType::F32) {
        if (vec) {
            const float4 a = *reinterpret_cast<const float4*>(row + 4 * i);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        } else {
            for (int k = 0; k < 4; ++k) v[k] = load_float(T, row, i + k);
        }
    } else if (vec) {
        const uint2 a = *reinterpret_cast<const uint2*>(row + 2 * i);
        for (int k = 0; k < 4; ++k) {
            const auto bits = static_cast<uint16_t>((k < 2 ? a.x : a.y) >> (16 * (k % 2)));
            v[k] = T == GgmlType::F16 ? fp16_to_f32(bits) : bf16_to_f32(bits);
        }
    } else {
        for (int k = 0; k < 4; ++k) v[k] = load_float(T, row, i + k);
    }
}

// Float weights (f32, f16, bf16): a warp per output row, its lanes taking four values in
// turn in one load each where the rows are aligned, for up to kRows rows of x, then the
// lanes' sums in a fixed tree. A block per output with 128 threads, value by value and a
// block-wide sum, took 12 us for the 2048 x 512 f32 router of a MoE layer on an H200
// (the file's routers are f32, read every token in every layer). A row's arithmetic is
// the same whatever rows share the launch and whichever loads the alignment allows.
// Route: then the last block to finish routes every row (matmul_topk): each block's
// stores are fenced before it counts itself done, and the last, which counted after all
// others, reads y as they left it (topk.cuh reads it through volatile loads).
struct Route {
    int64_t k;
    int32_t* ids;
    float* wt;
    unsigned* counter;
};
template <GgmlType T, bool Routes = false>
__global__ void matmul_f_k(Weight w, Rows x, Rows y, Route route) {
    const int lane = static_cast<int>(threadIdx.x) % warpSize;
    const int64_t ow = static_cast<int64_t>(blockIdx.x) * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    // A warp past the outputs leaves (plain), or computes the last one again and stores
    // nothing (Routes: the block meets at its barriers, and a CPU HIP runtime's shuffles
    // wait for the whole block).
    const bool has = ow < w.n_out;
    const int64_t o = has ? ow : w.n_out - 1;
    if (has || Routes) {
        const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRows;
        const int nr = static_cast<int>(x.rows - r0 < kRows ? x.rows - r0 : kRows);
        const uint8_t* wr = w.data + o * w.stride;
        constexpr unsigned kVec = T == GgmlType::F32 ? 16 : 8;
        const bool wvec = ((reinterpret_cast<uintptr_t>(w.data) | w.stride) % kVec) == 0;
        const bool xvec = ((reinterpret_cast<uintptr_t>(x.p) | static_cast<uintptr_t>(x.ld) * 4) % 16) == 0;
        float acc[kRows] = {};
        if (w.n_in % 4 == 0) {
            STRATA_UNROLL(4)
            for (int64_t g = lane; g < w.n_in / 4; g += warpSize) {
                float v[4];
                load4<T>(wr, 4 * g, wvec, v);
                for (int r = 0; r < kRows; ++r) {
                    if (r >= nr) break;
                    const float* xr = x.p + (r0 + r) * x.ld + 4 * g;
                    float xv[4];
                    if (xvec) {
                        const float4 a = *reinterpret_cast<const float4*>(xr);
                        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
                    } else {
                        for (int k = 0; k < 4; ++k) xv[k] = xr[k];
                    }
                    for (int k = 0; k < 4; ++k) acc[r] = fmaf(v[k], xv[k], acc[r]);
                }
            }
        } else {
            for (int64_t i = lane; i < w.n_in; i += warpSize) {
                const float v = load_float(T, wr, i);
                for (int r = 0; r < kRows; ++r) {
                    if (r >= nr) break;
                    acc[r] = fmaf(v, x.p[(r0 + r) * x.ld + i], acc[r]);
                }
            }
        }
        for (int r = 0; r < kRows; ++r) {
            if (r >= nr) break;
            const float s = warp_sum(acc[r]);
            if (lane == 0 && has) y.p[(r0 + r) * y.ld + o] = s;
        }
    }
    if constexpr (Routes) {
        __shared__ unsigned done;
        if (!last_to_finish(route.counter, gridDim.x * gridDim.y, done)) return;
        const int warps = static_cast<int>(blockDim.x / warpSize), warp = static_cast<int>(threadIdx.x / warpSize);
        for (int64_t t0 = 0; t0 < y.rows; t0 += warps) {  // the same rounds in every warp
            const int64_t t = t0 + warp;
            const bool on = t < y.rows;
            topk::route_row(y.p + (on ? t : 0) * y.ld, y.cols, route.k, route.ids + (on ? t : 0) * route.k,
                            route.wt + (on ? t : 0) * route.k, on);
        }
    }
}

template <GgmlType T>
__global__ void matmul_ids_k(const uint8_t* const* w, int64_t n_in, size_t stride, const int32_t* ids, int64_t div,
                             Rows x, Rows y, IqTables tab) {
    __shared__ float red[32];
    const int64_t o = blockIdx.x, i = blockIdx.y;
    const uint8_t* we = w[ids[i]];
    if (we == nullptr) return;  // an expert computed elsewhere: the whole block leaves its row as it is
    float acc[kRows] = {};
    dot_share<T>(we + o * stride, n_in, x.p + (i / div) * x.ld, x.ld, 1, acc, tab);
    const float s = block_sum(acc[0], red);
    if (threadIdx.x == 0) y.p[i * y.ld + o] = s;
}

template <GgmlType T>
__global__ void get_rows_k(Weight table, const int32_t* ids, Rows x, int32_t* bad, IqTables tab) {
    const int32_t id = ids[blockIdx.x];
    if (id < 0 || id >= table.n_out) {
        if (threadIdx.x == 0) atomicCAS(bad, 0, id + 1);
        return;
    }
    const uint8_t* w = table.data + static_cast<size_t>(id) * table.stride;
    float* out = x.p + static_cast<int64_t>(blockIdx.x) * x.ld;
    if constexpr (is_float(T)) {
        for (int64_t i = threadIdx.x; i < table.n_in; i += blockDim.x) out[i] = load_float(T, w, i);
    } else {
        constexpr int per_block = BlockInfo<T>::values / 32;
        for (int64_t c = threadIdx.x; c < table.n_in / 32; c += blockDim.x)
            dequant32<T>(w + (c / per_block) * BlockInfo<T>::bytes, static_cast<int>(c % per_block), out + c * 32,
                         tab);
    }
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

// matmul_f_k's grid: a warp per output, kRows rows of x per block.
dim3 float_grid(const Weight& w, const Rows& x) {
    const int64_t per = kThreads / warp_size();
    return dim3(static_cast<unsigned>((w.n_out + per - 1) / per), static_cast<unsigned>((x.rows + kRows - 1) / kRows));
}

void unsupported(GgmlType t, const char* op) {
    fail("{}: weight type {} has no GPU kernel", op, type_info(t).name);
}

}  // namespace

bool supports(GgmlType type) { return dispatch_weight(type, NoKernel{}); }

void get_rows(const Weight& table, const int32_t* ids, Rows x, int32_t* bad, const IqTables& tab, Stream s) {
    if (x.rows == 0) return;
    const bool ok = dispatch_weight(table.type, [&]<GgmlType T>() {
        launch(get_rows_k<T>, dim3(static_cast<unsigned>(x.rows)), dim3(kThreads), st(s), table, ids, x, bad, tab);
    });
    if (!ok) unsupported(table.type, "get_rows");
    check_launch("get_rows");
}

void matmul(const Weight& w, Rows x, Rows y, const IqTables& tab, Stream s) {
    if (x.rows == 0 || w.n_out == 0) return;
    const auto row_blocks = static_cast<unsigned>((x.rows + kRows - 1) / kRows);
    const bool ok = dispatch_weight(w.type, [&]<GgmlType T>() {
        if constexpr (is_float(T)) {
            launch(matmul_f_k<T>, float_grid(w, x), dim3(kThreads), st(s), w, x, y, Route{});
        } else {
            launch(matmul_k<T>, dim3(static_cast<unsigned>(w.n_out), row_blocks), dim3(kThreads), st(s), w, x, y, tab);
        }
    });
    if (!ok) unsupported(w.type, "matmul");
    check_launch("matmul");
}

bool float_weight(GgmlType type) {
    return is_float(type);
}

void matmul_topk(const Weight& w, Rows x, Rows y, int64_t k, int32_t* ids, float* wt, unsigned* counter, Stream s) {
    STRATA_CHECK(float_weight(w.type) && y.cols == w.n_out && w.n_out <= kTopkMaxExperts && k <= w.n_out,
                 "matmul_topk: {} of {} experts of {} weights (float weights, up to {} experts)", k, w.n_out,
                 type_info(w.type).name, kTopkMaxExperts);
    if (x.rows == 0) return;
    const Route route{k, ids, wt, counter};
    dispatch_weight(w.type, [&]<GgmlType T>() {
        if constexpr (is_float(T))
            launch(matmul_f_k<T, true>, float_grid(w, x), dim3(kThreads), st(s), w, x, y, route);
    });
    check_launch("matmul_topk");
}

void matmul_ids(GgmlType type, const uint8_t* const* w, int64_t n_in, int64_t n_out, size_t stride,
                const int32_t* ids, int64_t div, Rows x, Rows y, const IqTables& tab, Stream s) {
    if (y.rows == 0 || n_out == 0) return;
    const dim3 grid(static_cast<unsigned>(n_out), static_cast<unsigned>(y.rows));
    const bool ok = dispatch_weight(type, [&]<GgmlType T>() {
        launch(matmul_ids_k<T>, grid, dim3(kThreads), st(s), w, n_in, stride, ids, div, x, y, tab);
    });
    if (!ok) unsupported(type, "moe_experts");
    check_launch("moe_experts");
}

}  // namespace strata::gpu
