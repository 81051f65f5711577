// Dispatch from a type id to its row kernels, with the argument checks that keep a bad
// type or length an Error rather than a crash.
#include "engine/quant/quant.h"

#include "engine/core/error.h"
#include "engine/quant/blocks.h"

namespace strata {
namespace {

using QuantFn = void (*)(const float*, void*, int64_t);

struct Kernels {
    GgmlType type;
    DequantFn dequant;
    QuantFn quant;
};

namespace qd = quant_detail;
constexpr Kernels kKernels[] = {
    {GgmlType::F32, qd::dequant_f32, qd::quant_f32},
    {GgmlType::F16, qd::dequant_f16, qd::quant_f16},
    {GgmlType::BF16, qd::dequant_bf16, qd::quant_bf16},
    {GgmlType::Q4_0, qd::dequant_q4_0, qd::quant_q4_0},
    {GgmlType::Q4_1, qd::dequant_q4_1, qd::quant_q4_1},
    {GgmlType::Q5_0, qd::dequant_q5_0, qd::quant_q5_0},
    {GgmlType::Q5_1, qd::dequant_q5_1, qd::quant_q5_1},
    {GgmlType::Q8_0, qd::dequant_q8_0, qd::quant_q8_0},
    {GgmlType::Q2_K, qd::dequant_q2_K, qd::quant_q2_K},
    {GgmlType::Q3_K, qd::dequant_q3_K, qd::quant_q3_K},
    {GgmlType::Q4_K, qd::dequant_q4_K, qd::quant_q4_K},
    {GgmlType::Q5_K, qd::dequant_q5_K, qd::quant_q5_K},
    {GgmlType::Q6_K, qd::dequant_q6_K, qd::quant_q6_K},
    {GgmlType::Q8_K, qd::dequant_q8_K, qd::quant_q8_K},
    {GgmlType::IQ4_NL, qd::dequant_iq4_nl, qd::quant_iq4_nl},
    {GgmlType::IQ4_XS, qd::dequant_iq4_xs, qd::quant_iq4_xs},
    {GgmlType::IQ3_XXS, qd::dequant_iq3_xxs, qd::quant_iq3_xxs},
    {GgmlType::IQ3_S, qd::dequant_iq3_s, qd::quant_iq3_s},
    {GgmlType::IQ2_XXS, qd::dequant_iq2_xxs, qd::quant_iq2_xxs},
    {GgmlType::IQ2_XS, qd::dequant_iq2_xs, qd::quant_iq2_xs},
    {GgmlType::IQ2_S, qd::dequant_iq2_s, qd::quant_iq2_s},
    {GgmlType::IQ1_S, qd::dequant_iq1_s, qd::quant_iq1_s},
    {GgmlType::IQ1_M, qd::dequant_iq1_m, qd::quant_iq1_m},
};

// Finds the kernels and checks n; returns the number of blocks.
const Kernels& lookup(GgmlType type, int64_t n, int64_t* nb, const char* what) {
    const TypeInfo* ti = type_info(static_cast<uint32_t>(type));
    STRATA_CHECK(ti != nullptr, "{}: unknown ggml type id {}", what, static_cast<uint32_t>(type));
    const Kernels* k = nullptr;
    for (const Kernels& e : kKernels)
        if (e.type == type) k = &e;
    STRATA_CHECK(ti->supported && k != nullptr, "{}: type {} is not supported", what, ti->name);
    STRATA_CHECK(n >= 0 && n % ti->block_size == 0,
                 "{}: n = {} is not a multiple of the {} block size {}", what, n, ti->name,
                 ti->block_size);
    *nb = n / ti->block_size;
    return *k;
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
    int64_t nb = 0;
    const Kernels& k = lookup(type, n, &nb, "dequantize_row");
    if (nb > 0) k.dequant(src, dst, nb);
}

DequantFn dequantizer(GgmlType type) {
    int64_t nb = 0;
    return lookup(type, 0, &nb, "dequantizer").dequant;
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
    int64_t nb = 0;
    const Kernels& k = lookup(type, n, &nb, "quantize_row");
    if (nb > 0) k.quant(src, dst, nb);
}

}  // namespace strata
