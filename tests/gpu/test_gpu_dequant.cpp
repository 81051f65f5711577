// dequant32<T> on the device against the host dequantizers: every 32-value chunk of
// every block, bit-exact, for every quantized type Strata supports. Blocks are placed at
// an odd device address, as a packed tensor can put them, so a misaligned multi-byte load
// would fault on a GPU.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/device.h"
#include "engine/core/half.h"
#include "engine/quant/quant.h"
#include "engine/quant/types.h"
#include "kernels/cuda/dequant.cuh"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/random_helpers.h"

namespace strata::gpu {
namespace {

// One thread per 32-value chunk.
template <GgmlType T>
__global__ void dequant_chunks(const uint8_t* src, float* dst, int n_chunks, IqTables tab) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n_chunks) return;
    constexpr int per_block = BlockInfo<T>::values / 32;
    dequant32<T>(src + static_cast<size_t>(i / per_block) * BlockInfo<T>::bytes, i % per_block,
                 dst + 32 * static_cast<size_t>(i), tab);
}

// Every fp16 and bf16 bit pattern, converted on the device.
__global__ void convert_all_16bit(float* from_half, float* from_bf16) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= 65536) return;
    from_half[i] = fp16_to_f32(static_cast<uint16_t>(i));
    from_bf16[i] = bf16_to_f32(static_cast<uint16_t>(i));
}

// Rows of N(0, s^2) data at a few scales (small, unit, large); 2048 values each.
std::vector<float> test_values() {
    std::vector<float> x;
    uint32_t seed = 7;
    for (float s : {0.01f, 1.0f, 40.0f}) {
        const std::vector<float> r = test::gaussian(2048, seed++, s);
        x.insert(x.end(), r.begin(), r.end());
    }
    return x;
}

template <GgmlType T>
void check_type(const IqTables& tab, const std::vector<float>& x) {
    const TypeInfo& ti = type_info(T);
    INFO("type " << ti.name);
    REQUIRE(BlockInfo<T>::bytes == static_cast<int>(ti.type_size));
    REQUIRE(BlockInfo<T>::values == static_cast<int>(ti.block_size));

    const int64_t n = static_cast<int64_t>(x.size());
    const size_t bytes = row_bytes(T, n);
    std::vector<uint8_t> q(bytes);
    quantize_row(T, x.data(), q.data(), n);
    std::vector<float> want(x.size());
    dequantize_row(T, q.data(), want.data(), n);

    void* dq = nullptr;
    void* dy = nullptr;
    GPU_REQUIRE(gpuMalloc(&dq, bytes + 1));
    GPU_REQUIRE(gpuMalloc(&dy, x.size() * sizeof(float)));
    const auto* src = static_cast<const uint8_t*>(dq) + 1;  // odd address
    GPU_REQUIRE(gpuMemcpyAsync(const_cast<uint8_t*>(src), q.data(), bytes, gpuMemcpyDefault, 0));
    GPU_REQUIRE(gpuMemsetAsync(dy, 0xFF, x.size() * sizeof(float), 0));  // NaN: unwritten shows
    GPU_REQUIRE(gpuStreamSynchronize(0));

    const int n_chunks = static_cast<int>(n / 32);
    const int threads = 64;
    launch(dequant_chunks<T>, dim3((n_chunks + threads - 1) / threads), dim3(threads), 0, src,
           static_cast<float*>(dy), n_chunks, tab);
    GPU_REQUIRE(gpuGetLastError());
    std::vector<float> got(x.size());
    GPU_REQUIRE(gpuStreamSynchronize(0));  // a CPU HIP runtime's null-stream copy may not wait for a kernel
    GPU_REQUIRE(gpuMemcpyAsync(got.data(), dy, got.size() * sizeof(float), gpuMemcpyDefault, 0));
    GPU_REQUIRE(gpuStreamSynchronize(0));
    GPU_REQUIRE(gpuFree(dq));
    GPU_REQUIRE(gpuFree(dy));

    int64_t mismatches = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            if (first < 0) first = static_cast<int64_t>(i);
            ++mismatches;
        }
    }
    std::string where = "none";
    if (first >= 0)
        where = std::to_string(first) + ": got " + std::to_string(got[first]) + " want " +
                std::to_string(want[first]);
    INFO("first mismatch at " << where);
    CHECK(mismatches == 0);
}

template <GgmlType... Ts>
struct TypeList {
    static bool contains(GgmlType t) { return ((t == Ts) || ...); }
    static void check_all(const IqTables& tab, const std::vector<float>& x) { (check_type<Ts>(tab, x), ...); }
};

using Quantized = TypeList<GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::Q8_K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS,
                           GgmlType::IQ1_S, GgmlType::IQ4_NL, GgmlType::IQ3_S, GgmlType::IQ2_S,
                           GgmlType::IQ4_XS, GgmlType::IQ1_M>;

}  // namespace

TEST_CASE("half_to_float and bf16_to_float are exact for every bit pattern", "[gpu]") {
    if (!start_device()) return;

    void* dev = nullptr;
    GPU_REQUIRE(gpuMalloc(&dev, 2 * 65536 * sizeof(float)));
    float* from_half = static_cast<float*>(dev);
    launch(convert_all_16bit, dim3(65536 / 256), dim3(256), 0, from_half, from_half + 65536);
    GPU_REQUIRE(gpuGetLastError());
    // Finished before the copy: HIP-CPU's copy on the null stream did not always wait for
    // the kernel before it (about one run in three read memory the kernel had not written).
    GPU_REQUIRE(gpuStreamSynchronize(0));
    std::vector<float> got(2 * 65536);
    GPU_REQUIRE(gpuMemcpyAsync(got.data(), dev, got.size() * sizeof(float), gpuMemcpyDefault, 0));
    GPU_REQUIRE(gpuStreamSynchronize(0));
    GPU_REQUIRE(gpuFree(dev));

    int bad_half = 0, bad_bf16 = 0;  // compared as bits: NaN payloads and -0 count
    for (uint32_t h = 0; h < 65536; ++h) {
        bad_half += f32_to_bits(got[h]) != f32_to_bits(fp16_to_f32(static_cast<uint16_t>(h)));
        bad_bf16 += f32_to_bits(got[65536 + h]) != f32_to_bits(bf16_to_f32(static_cast<uint16_t>(h)));
    }
    CHECK(bad_half == 0);
    CHECK(bad_bf16 == 0);
}

TEST_CASE("dequant32 matches the host dequantizers bit for bit", "[gpu]") {
    if (!start_device()) return;

    for (GgmlType t : supported_types()) {
        INFO("type " << type_info(t).name);
        if (type_info(t).quantized) CHECK(Quantized::contains(t));  // a new format needs a dequant32
    }
    const IqTables tab = upload_iq_tables();
    CHECK(upload_iq_tables().iq1s == tab.iq1s);  // one copy per device
    Quantized::check_all(tab, test_values());
}

}  // namespace strata::gpu
