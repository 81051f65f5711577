// The ggml type table (MODEL_SPEC.md 1.6). Ids that ggml never defined or removed
// (4, 5, 31-33, 36-38) and ids >= 40 (reused by forks for private types) are unknown.
#include "engine/quant/types.h"

#include <array>
#include <cctype>

namespace strata {
namespace {

using T = GgmlType;

// {type, name, block_size, type_size, quantized, supported}
constexpr TypeInfo kTypes[] = {
    {T::F32, "f32", 1, 4, false, true},
    {T::F16, "f16", 1, 2, false, true},
    {T::Q4_0, "q4_0", 32, 18, true, true},
    {T::Q4_1, "q4_1", 32, 20, true, true},
    {T::Q5_0, "q5_0", 32, 22, true, true},
    {T::Q5_1, "q5_1", 32, 24, true, true},
    {T::Q8_0, "q8_0", 32, 34, true, true},
    {T::Q8_1, "q8_1", 32, 36, true, false},
    {T::Q2_K, "q2_K", 256, 84, true, true},
    {T::Q3_K, "q3_K", 256, 110, true, true},
    {T::Q4_K, "q4_K", 256, 144, true, true},
    {T::Q5_K, "q5_K", 256, 176, true, true},
    {T::Q6_K, "q6_K", 256, 210, true, true},
    {T::Q8_K, "q8_K", 256, 292, true, true},
    {T::IQ2_XXS, "iq2_xxs", 256, 66, true, true},
    {T::IQ2_XS, "iq2_xs", 256, 74, true, true},
    {T::IQ3_XXS, "iq3_xxs", 256, 98, true, true},
    {T::IQ1_S, "iq1_s", 256, 50, true, true},
    {T::IQ4_NL, "iq4_nl", 32, 18, true, true},
    {T::IQ3_S, "iq3_s", 256, 110, true, true},
    {T::IQ2_S, "iq2_s", 256, 82, true, true},
    {T::IQ4_XS, "iq4_xs", 256, 136, true, true},
    {T::I8, "i8", 1, 1, false, false},
    {T::I16, "i16", 1, 2, false, false},
    {T::I32, "i32", 1, 4, false, false},
    {T::I64, "i64", 1, 8, false, false},
    {T::F64, "f64", 1, 8, false, false},
    {T::IQ1_M, "iq1_m", 256, 56, true, true},
    {T::BF16, "bf16", 1, 2, false, true},
    {T::TQ1_0, "tq1_0", 256, 54, true, false},
    {T::TQ2_0, "tq2_0", 256, 66, true, false},
    {T::MXFP4, "mxfp4", 32, 17, true, false},
};

constexpr uint32_t kMaxId = 40;

// Id -> index into kTypes, -1 for ids ggml never defined.
constexpr std::array<int, kMaxId> make_index() {
    std::array<int, kMaxId> idx{};
    for (int& i : idx) i = -1;
    for (int i = 0; i < static_cast<int>(std::size(kTypes)); ++i)
        idx[static_cast<uint32_t>(kTypes[i].type)] = i;
    return idx;
}
constexpr auto kIndex = make_index();

constexpr auto make_supported() {
    std::array<GgmlType, 23> out{};
    size_t n = 0;
    for (uint32_t id = 0; id < kMaxId; ++id)
        if (kIndex[id] >= 0 && kTypes[kIndex[id]].supported) out[n++] = kTypes[kIndex[id]].type;
    if (n != out.size()) throw "supported type count changed";  // compile-time error
    return out;
}
constexpr auto kSupported = make_supported();

bool iequal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) !=
            std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    }
    return true;
}

}  // namespace

const TypeInfo* type_info(uint32_t id) {
    if (id >= kMaxId || kIndex[id] < 0) return nullptr;
    return &kTypes[kIndex[id]];
}

std::optional<GgmlType> type_from_name(std::string_view name) {
    for (const TypeInfo& t : kTypes)
        if (iequal(t.name, name)) return t.type;
    return std::nullopt;
}

std::span<const GgmlType> supported_types() { return kSupported; }

}  // namespace strata
