// The integer dot products of matmul_q.cu: decode16<T> against the host dequantizers
// (every 16-value unit of every block, bit-exact through value = ws * w - wm), and
// matmul_q / quantize_act against a double-precision product of the dequantized weights.
// The checks take the type at run time and only the probe kernel is a template: the
// checks instantiated once per type made this file take minutes of nvcc in CI.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/device.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/int_decode.cuh"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/random_helpers.h"

namespace strata::gpu {
namespace {

// One thread per 16-value unit: its values as ws * w - wm, the way the dot products use them
// (A16: decode16a's loads, for blocks of rows at 16-byte aligned addresses).
template <GgmlType T, bool A16>
__global__ void decode_units(const uint8_t* src, float* dst, int n_units, IqTables tab) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n_units) return;
    constexpr int per_block = BlockInfo<T>::values / 32;
    const int c = i / 2;
    uint32_t w[4];
    float ws, wm;
    const uint8_t* blk = src + static_cast<size_t>(c / per_block) * BlockInfo<T>::bytes;
    if constexpr (A16)
        decode16a<T>(blk, c % per_block, i % 2, w, &ws, &wm, tab);
    else
        decode16<T>(blk, c % per_block, i % 2, w, &ws, &wm, tab);
    for (int v = 0; v < 16; ++v) {
        const float p = dequant_detail::mul_rn(ws, static_cast<float>(static_cast<int8_t>(w[v / 4] >> (8 * (v % 4)))));
        dst[16 * i + v] = kHasMin<T> ? p - wm : p;
    }
}

template <typename T>
T* upload(const std::vector<T>& v, size_t offset_bytes = 0) {
    void* p = nullptr;
    GPU_REQUIRE(gpuMalloc(&p, v.size() * sizeof(T) + offset_bytes));
    auto* dst = reinterpret_cast<T*>(static_cast<uint8_t*>(p) + offset_bytes);
    GPU_REQUIRE(gpuMemcpyAsync(dst, v.data(), v.size() * sizeof(T), gpuMemcpyDefault, 0));
    GPU_REQUIRE(gpuStreamSynchronize(0));
    return dst;
}

// The stream of the products' kernels: a created one, as GpuOps uses (a CPU HIP runtime
// does not order the kernels queued on its null stream after one another, and the
// quantizer's kernel must finish before the product's reads it).
Stream kernel_stream() {
    static const Stream s = stream_create();
    return s;
}

std::vector<float> download(const float* p, size_t n) {
    std::vector<float> out(n);
    stream_sync(kernel_stream());
    GPU_REQUIRE(gpuStreamSynchronize(0));  // a CPU HIP runtime's null-stream copy may not wait for a kernel
    GPU_REQUIRE(gpuMemcpyAsync(out.data(), p, n * sizeof(float), gpuMemcpyDefault, 0));
    GPU_REQUIRE(gpuStreamSynchronize(0));
    return out;
}

std::vector<uint8_t> quantized(GgmlType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

// got and want equal bit for bit (NaN included).
void compare_bits(const std::vector<float>& got, const std::vector<float>& want) {
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (first < 0) first = static_cast<int64_t>(i);
            ++bad;
        }
    INFO("first mismatch " << first << (first >= 0 ? ": got " + std::to_string(got[first]) + " want " +
                                                         std::to_string(want[first])
                                                   : std::string()));
    CHECK(bad == 0);
}

void check_decode(GgmlType type, const IqTables& tab) {
    INFO("type " << type_info(type).name);
    std::vector<float> x;
    uint32_t seed = 11;
    for (float s : {0.01f, 1.0f, 40.0f}) {
        const std::vector<float> r = test::gaussian(2048, seed++, s);
        x.insert(x.end(), r.begin(), r.end());
    }
    const int64_t n = static_cast<int64_t>(x.size());
    const std::vector<uint8_t> q = quantized(type, x);
    std::vector<float> want(x.size());
    dequantize_row(type, q.data(), want.data(), n);

    // Blocks at an address that is even, not 4-aligned (decode16), and 16-aligned (decode16a).
    for (const bool a16 : {false, true}) {
        INFO((a16 ? "decode16a" : "decode16"));
        const size_t offset = a16 ? 0 : 2;
        const uint8_t* src = upload(q, offset);
        std::vector<float> nan(x.size(), std::nanf(""));
        float* dy = upload(nan);
        const int n_units = static_cast<int>(n / 16);
        CHECK(dispatch_quant(type, [&]<GgmlType U>() {
            if (a16) launch(decode_units<U, true>, dim3((n_units + 63) / 64), dim3(64), 0, src, dy, n_units, tab);
            else launch(decode_units<U, false>, dim3((n_units + 63) / 64), dim3(64), 0, src, dy, n_units, tab);
        }));
        GPU_REQUIRE(gpuGetLastError());
        const std::vector<float> got = download(dy, x.size());
        GPU_REQUIRE(gpuFree(const_cast<uint8_t*>(src) - offset));
        GPU_REQUIRE(gpuFree(dy));
        compare_bits(got, want);
    }
}

// y = W x for n_out rows of n_in values, T_rows rows of x, against the double product of
// the dequantized weights: within 1e-4 of sum |w x| (the two-digit activations).
void check_matmul(GgmlType type, const IqTables& tab) {
    INFO("type " << type_info(type).name);
    // rows: two prompt tiles; n_out: the last warp's outputs cut short.
    const int64_t n_in = type_info(type).block_size == 256 ? 768 : 544, n_out = 37, rows = 21;
    const std::vector<float> wf = test::gaussian(static_cast<size_t>(n_in * n_out), 3, 0.5f);
    std::vector<float> x = test::gaussian(static_cast<size_t>(n_in * rows), 4, 2.0f);
    for (int64_t i = 0; i < n_in; ++i) x[static_cast<size_t>(3 * n_in + i)] *= 1e-3f;  // a row of small values
    const size_t rb = row_bytes(type, n_in);
    std::vector<uint8_t> wq(rb * static_cast<size_t>(n_out));
    std::vector<float> wd(wf.size());
    for (int64_t o = 0; o < n_out; ++o) {
        quantize_row(type, wf.data() + o * n_in, wq.data() + o * rb, n_in);
        dequantize_row(type, wq.data() + o * rb, wd.data() + o * n_in, n_in);
    }
    const uint8_t* dw = upload(wq);
    float* dx = upload(x);
    std::vector<float> zeros(static_cast<size_t>(n_out * rows), 0.0f);
    float* dy = upload(zeros);
    float* dy1 = upload(std::vector<float>(static_cast<size_t>(n_out), 0.0f));
    void* scratch = nullptr;
    GPU_REQUIRE(gpuMalloc(&scratch, act_q_bytes(n_in, rows)));
    const Weight w{type, 0, dw, n_in, n_out, rb};
    const Stream st = kernel_stream();
    matmul_q(w, quantize_act({dx, n_in, rows, n_in}, scratch, st), {dy, n_out, rows, n_out}, tab, st);
    const std::vector<float> y = download(dy, zeros.size());
    // The last row alone (a decode step) equals that row of the many-row call.
    matmul_q(w, quantize_act({dx + (rows - 1) * n_in, n_in, 1, n_in}, scratch, st), {dy1, n_out, 1, n_out}, tab, st);
    const std::vector<float> y1 = download(dy1, static_cast<size_t>(n_out));
    for (int64_t t = 0; t < rows; ++t)
        for (int64_t o = 0; o < n_out; ++o) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n_in; ++i) {
                const double p = static_cast<double>(wd[o * n_in + i]) * x[t * n_in + i];
                want += p;
                mag += std::fabs(p);
            }
            const float got = y[t * n_out + o];
            INFO("row " << t << " out " << o << " got " << got << " want " << want << " mag " << mag);
            CHECK(std::fabs(got - want) <= 1e-4 * mag + 1e-9);
        }
    CHECK(std::memcmp(y1.data(), y.data() + (rows - 1) * n_out, y1.size() * sizeof(float)) == 0);
    // The same weights at an address that is even, not 4-aligned: the loads differ (no
    // decode16a, 16-bit pieces), the products not.
    const uint8_t* dw2 = upload(wq, 2);
    matmul_q({type, 0, dw2, n_in, n_out, rb}, quantize_act({dx, n_in, rows, n_in}, scratch, st),
             {dy, n_out, rows, n_out}, tab, st);
    const std::vector<float> y2 = download(dy, zeros.size());
    CHECK(std::memcmp(y2.data(), y.data(), y.size() * sizeof(float)) == 0);
    GPU_REQUIRE(gpuFree(const_cast<uint8_t*>(dw2) - 2));
    for (void* p : {static_cast<void*>(const_cast<uint8_t*>(dw)), static_cast<void*>(dx), static_cast<void*>(dy),
                    static_cast<void*>(dy1), scratch})
        GPU_REQUIRE(gpuFree(p));
}

// Every quantized type the GPU kernels take (dispatch.h's list).
std::vector<GgmlType> int_types() {
    std::vector<GgmlType> out;
#define STRATA_TEST_TYPE(X) out.push_back(GgmlType::X);
    STRATA_GPU_QUANT_TYPES(STRATA_TEST_TYPE)
#undef STRATA_TEST_TYPE
    return out;
}

}  // namespace

TEST_CASE("decode16 gives dequant32's values bit for bit as ws * w - wm", "[gpu]") {
    if (!start_device()) return;
    for (GgmlType t : supported_types()) {
        INFO("type " << type_info(t).name);
        if (type_info(t).quantized) CHECK(int_dot(t));  // a new format needs a decode16
    }
    const IqTables tab = upload_iq_tables();
    for (GgmlType t : int_types()) check_decode(t, tab);
}

TEST_CASE("matmul_q: integer dot products within 1e-4 of the exact product, one row as in a window", "[gpu]") {
    if (!start_device()) return;
    const IqTables tab = upload_iq_tables();
    for (GgmlType t : int_types()) check_matmul(t, tab);
}

}  // namespace strata::gpu
