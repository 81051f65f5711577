// ggml tensor type ids and their block geometry, as llama.cpp stores them.
// Ids are fixed by the GGUF format (MODEL_SPEC.md 1.6); unknown ids are refused.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace strata {

enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
    IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
    IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeInfo {
    GgmlType type;
    std::string_view name;   // "q4_K" style names as ggml prints them, lower-case
    uint32_t block_size;     // values per block
    uint32_t type_size;      // bytes per block
    bool quantized;          // block format (needs a dequantizer)
    bool supported;          // Strata has a dequantizer and quantizer for it
};

// Known type ids (supported or not). Returns nullptr for an id ggml never defined.
const TypeInfo* type_info(uint32_t id);
inline const TypeInfo& type_info(GgmlType t) { return *type_info(static_cast<uint32_t>(t)); }

// Case-insensitive lookup by name ("q4_k", "Q4_K", "iq3_xxs", "f16", ...).
std::optional<GgmlType> type_from_name(std::string_view name);

// Every type with a dequantizer and quantizer in Strata, in id order.
std::span<const GgmlType> supported_types();

// Bytes of one row of n values; n must be a multiple of the block size.
inline size_t row_bytes(GgmlType t, int64_t n) {
    const TypeInfo& ti = type_info(t);
    return static_cast<size_t>(n / ti.block_size) * ti.type_size;
}

}  // namespace strata
