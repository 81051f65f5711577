// Products with weights in their file's block format, read as they are on the device:
// matmul (one block per output and up to kRows rows of x), the experts' products by id,
// and get_rows. Each thread takes whole 32-value chunks of a weight row in turn, so a
// row's sum is the same sequence of operations whatever else shares the launch: one row
// of a many-row call equals that row alone.
#include "engine/core/error.h"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kRows = 4;

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
    if constexpr (T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16) {
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
    if constexpr (T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16) {
        for (int64_t i = threadIdx.x; i < table.n_in; i += blockDim.x) out[i] = load_float(T, w, i);
    } else {
        constexpr int per_block = BlockInfo<T>::values / 32;
        for (int64_t c = threadIdx.x; c < table.n_in / 32; c += blockDim.x)
            dequant32<T>(w + (c / per_block) * BlockInfo<T>::bytes, static_cast<int>(c % per_block), out + c * 32,
                         tab);
    }
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

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
    const dim3 grid(static_cast<unsigned>(w.n_out), static_cast<unsigned>((x.rows + kRows - 1) / kRows));
    const bool ok = dispatch_weight(w.type, [&]<GgmlType T>() { launch(matmul_k<T>, grid, dim3(kThreads), st(s), w, x, y, tab); });
    if (!ok) unsupported(w.type, "matmul");
    check_launch("matmul");
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
