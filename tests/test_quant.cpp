// Quantization formats: type table, fp16/bf16 conversions, hand-built known-answer
// blocks for every format (byte offsets written out here, independent of blocks.h),
// grid checksums, quantizer round-trip error bounds (docs/quant.md) and argument errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/quant/blocks.h"
#include "engine/quant/iq_grids.h"
#include "engine/quant/quant.h"
#include "random_helpers.h"

using namespace strata;

namespace {

constexpr uint16_t kOne = 0x3C00, kHalf = 0x3800, kQuarter = 0x3400, kMinusOne = 0xBC00;

void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) { std::memcpy(&b[off], &v, 2); }
void put32(std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(&b[off], &v, 4); }

std::vector<float> deq(GgmlType t, const std::vector<uint8_t>& blk) {
    const TypeInfo& ti = type_info(t);
    REQUIRE(blk.size() == ti.type_size);
    std::vector<float> y(ti.block_size);
    dequantize_row(t, blk.data(), y.data(), ti.block_size);
    return y;
}

using test::gaussian;

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
    double err = 0, ss = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        err += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
        ss += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(err / ss);
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
    quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
    return y;
}

}  // namespace

// ---- type table ---------------------------------------------------------------------------

TEST_CASE("type table matches MODEL_SPEC 1.6", "[quant][types]") {
    struct Row { uint32_t id; const char* name; uint32_t block, size; bool supported; };
    const Row rows[] = {
        {0, "f32", 1, 4, true},        {1, "f16", 1, 2, true},         {2, "q4_0", 32, 18, true},
        {3, "q4_1", 32, 20, true},     {6, "q5_0", 32, 22, true},      {7, "q5_1", 32, 24, true},
        {8, "q8_0", 32, 34, true},     {9, "q8_1", 32, 36, false},     {10, "q2_K", 256, 84, true},
        {11, "q3_K", 256, 110, true},  {12, "q4_K", 256, 144, true},   {13, "q5_K", 256, 176, true},
        {14, "q6_K", 256, 210, true},  {15, "q8_K", 256, 292, true},   {16, "iq2_xxs", 256, 66, true},
        {17, "iq2_xs", 256, 74, true}, {18, "iq3_xxs", 256, 98, true}, {19, "iq1_s", 256, 50, true},
        {20, "iq4_nl", 32, 18, true},  {21, "iq3_s", 256, 110, true},  {22, "iq2_s", 256, 82, true},
        {23, "iq4_xs", 256, 136, true}, {24, "i8", 1, 1, false},       {25, "i16", 1, 2, false},
        {26, "i32", 1, 4, false},      {27, "i64", 1, 8, false},       {28, "f64", 1, 8, false},
        {29, "iq1_m", 256, 56, true}, {30, "bf16", 1, 2, true},       {34, "tq1_0", 256, 54, false},
        {35, "tq2_0", 256, 66, false}, {39, "mxfp4", 32, 17, false},
    };
    std::vector<bool> known(64, false);
    for (const Row& r : rows) {
        INFO("id " << r.id);
        const TypeInfo* ti = type_info(r.id);
        REQUIRE(ti != nullptr);
        CHECK(static_cast<uint32_t>(ti->type) == r.id);
        CHECK(ti->name == r.name);
        CHECK(ti->block_size == r.block);
        CHECK(ti->type_size == r.size);
        CHECK(ti->supported == r.supported);
        CHECK(ti->quantized == (r.block > 1));
        known[r.id] = true;
    }
    for (uint32_t id = 0; id < 64; ++id) {
        INFO("id " << id);
        if (!known[id]) CHECK(type_info(id) == nullptr);
    }
    CHECK(type_info(1000u) == nullptr);
    CHECK(type_info(0xFFFFFFFFu) == nullptr);
}

TEST_CASE("supported_types is the supported set in id order", "[quant][types]") {
    const auto sup = supported_types();
    REQUIRE(sup.size() == 23);
    for (size_t i = 0; i < sup.size(); ++i) {
        CHECK(type_info(sup[i]).supported);
        if (i > 0) CHECK(static_cast<uint32_t>(sup[i - 1]) < static_cast<uint32_t>(sup[i]));
    }
    CHECK(sup.front() == GgmlType::F32);
    CHECK(sup.back() == GgmlType::BF16);
}

TEST_CASE("type_from_name round trip, case-insensitive", "[quant][types]") {
    for (uint32_t id = 0; id < 40; ++id) {
        const TypeInfo* ti = type_info(id);
        if (!ti) continue;
        const std::string name(ti->name);
        CHECK(type_from_name(name) == ti->type);
        std::string upper = name;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        CHECK(type_from_name(upper) == ti->type);
    }
    CHECK(type_from_name("q4_k") == GgmlType::Q4_K);
    CHECK(type_from_name("IQ3_XXS") == GgmlType::IQ3_XXS);
    CHECK(type_from_name("Bf16") == GgmlType::BF16);
    CHECK_FALSE(type_from_name("q4_2").has_value());
    CHECK_FALSE(type_from_name("").has_value());
    CHECK_FALSE(type_from_name("q4_k ").has_value());
    CHECK_FALSE(type_from_name("iq3_xx").has_value());
}

TEST_CASE("block structs have ggml's sizes", "[quant][types]") {
    CHECK(sizeof(block_q4_0) == type_info(GgmlType::Q4_0).type_size);
    CHECK(sizeof(block_q4_1) == type_info(GgmlType::Q4_1).type_size);
    CHECK(sizeof(block_q5_0) == type_info(GgmlType::Q5_0).type_size);
    CHECK(sizeof(block_q5_1) == type_info(GgmlType::Q5_1).type_size);
    CHECK(sizeof(block_q8_0) == type_info(GgmlType::Q8_0).type_size);
    CHECK(sizeof(block_q2_K) == type_info(GgmlType::Q2_K).type_size);
    CHECK(sizeof(block_q3_K) == type_info(GgmlType::Q3_K).type_size);
    CHECK(sizeof(block_q4_K) == type_info(GgmlType::Q4_K).type_size);
    CHECK(sizeof(block_q5_K) == type_info(GgmlType::Q5_K).type_size);
    CHECK(sizeof(block_q6_K) == type_info(GgmlType::Q6_K).type_size);
    CHECK(sizeof(block_q8_K) == type_info(GgmlType::Q8_K).type_size);
    CHECK(sizeof(block_iq4_nl) == type_info(GgmlType::IQ4_NL).type_size);
    CHECK(sizeof(block_iq4_xs) == type_info(GgmlType::IQ4_XS).type_size);
    CHECK(sizeof(block_iq3_xxs) == type_info(GgmlType::IQ3_XXS).type_size);
    CHECK(sizeof(block_iq3_s) == type_info(GgmlType::IQ3_S).type_size);
    CHECK(sizeof(block_iq2_xxs) == type_info(GgmlType::IQ2_XXS).type_size);
    CHECK(sizeof(block_iq2_xs) == type_info(GgmlType::IQ2_XS).type_size);
    CHECK(sizeof(block_iq2_s) == type_info(GgmlType::IQ2_S).type_size);
    CHECK(sizeof(block_iq1_s) == type_info(GgmlType::IQ1_S).type_size);
    CHECK(sizeof(block_iq1_m) == type_info(GgmlType::IQ1_M).type_size);
}

// ---- fp16 / bf16 ----------------------------------------------------------------------

TEST_CASE("fp16: every bit pattern round-trips", "[quant][half]") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_f32(static_cast<uint16_t>(h));
        const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        if (nan) {
            REQUIRE(std::isnan(f));
            REQUIRE(std::isnan(fp16_to_f32(f32_to_fp16(f))));
        } else {
            REQUIRE(f32_to_fp16(f) == h);
        }
    }
    CHECK(fp16_to_f32(0x3C00) == 1.0f);
    CHECK(fp16_to_f32(0xC000) == -2.0f);
    CHECK(fp16_to_f32(0x7BFF) == 65504.0f);
    CHECK(fp16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(fp16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(fp16_to_f32(0x0400) == std::ldexp(1.0f, -14));
    CHECK(std::isinf(fp16_to_f32(0xFC00)));
    CHECK(std::signbit(fp16_to_f32(0x8000)));
}

TEST_CASE("fp16: round to nearest even at every midpoint", "[quant][half]") {
    // Consecutive finite fp16 values lo < hi; their midpoint is exact in f32.
    for (uint32_t h = 0; h < 0x7BFF; ++h) {
        const float lo = fp16_to_f32(static_cast<uint16_t>(h));
        const float hi = fp16_to_f32(static_cast<uint16_t>(h + 1));
        const float mid = 0.5f * (lo + hi);
        const uint16_t even = static_cast<uint16_t>((h & 1) ? h + 1 : h);
        REQUIRE(f32_to_fp16(mid) == even);
        REQUIRE(f32_to_fp16(std::nextafter(mid, 1e9f)) == h + 1);
        REQUIRE(f32_to_fp16(std::nextafter(mid, 0.0f)) == h);
        REQUIRE(f32_to_fp16(-mid) == (even | 0x8000));
    }
    CHECK(f32_to_fp16(65519.99f) == 0x7BFF);
    CHECK(f32_to_fp16(65520.0f) == 0x7C00);  // tie between 65504 (odd) and 65536 -> inf
    CHECK(f32_to_fp16(1e6f) == 0x7C00);
    CHECK(f32_to_fp16(-1e6f) == 0xFC00);
    CHECK(f32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24
    CHECK(f32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // tie between 1 and 2 ulp
    CHECK(f32_to_fp16(1e-10f) == 0x0000);
    CHECK(f32_to_fp16(-0.0f) == 0x8000);
    CHECK(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
    CHECK(f32_to_fp16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);
    const uint16_t nan = f32_to_fp16(std::nanf(""));
    CHECK((nan & 0x7C00) == 0x7C00);
    CHECK((nan & 0x3FF) != 0);
}

TEST_CASE("bf16: exact widening, ggml rounding, quiet NaN", "[quant][half]") {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float f = bf16_to_f32(static_cast<uint16_t>(b));
        REQUIRE(f32_to_bits(f) == b << 16);
        const bool nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
        if (nan) {
            REQUIRE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
            continue;
        }
        REQUIRE(f32_to_bf16(f) == b);
        if ((b & 0x7F80) == 0x7F80) continue;  // inf: no midpoints above
        const uint32_t mid = (b << 16) | 0x8000u;
        REQUIRE(f32_to_bf16(bits_to_f32(mid)) == ((b & 1) ? b + 1 : b));
        REQUIRE(f32_to_bf16(bits_to_f32(mid + 1)) == b + 1);
        REQUIRE(f32_to_bf16(bits_to_f32(mid - 1)) == b);
    }
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(bits_to_f32(0x3F808000u)) == 0x3F80);
    CHECK(f32_to_bf16(bits_to_f32(0x3F818000u)) == 0x3F82);
    CHECK(f32_to_bf16(bits_to_f32(0x7F7FFFFFu)) == 0x7F80);  // max float rounds to inf
    CHECK(f32_to_bf16(bits_to_f32(0x7F800001u)) == 0x7FC0);  // signalling NaN -> quiet
    CHECK(f32_to_bf16(bits_to_f32(0xFF800001u)) == 0xFFC0);
    CHECK(f32_to_bf16(bits_to_f32(0x7FFFFFFFu)) == 0x7FFF);
}

TEST_CASE("f32/f16/bf16 rows", "[quant][half]") {
    const std::vector<float> x = {1.0f, -2.5f, 65504.0f, 1e-8f, 0.0f, -0.0f, 3.14159f, 1e30f};
    std::vector<uint8_t> q(x.size() * 4);
    std::vector<float> y(x.size());
    quantize_row(GgmlType::F32, x.data(), q.data(), 8);
    dequantize_row(GgmlType::F32, q.data(), y.data(), 8);
    CHECK(std::memcmp(x.data(), y.data(), 32) == 0);
    quantize_row(GgmlType::F16, x.data(), q.data(), 8);
    dequantize_row(GgmlType::F16, q.data(), y.data(), 8);
    for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == fp16_to_f32(f32_to_fp16(x[i])));
    CHECK(q[0] == 0x00);
    CHECK(q[1] == 0x3C);  // little-endian 0x3C00
    quantize_row(GgmlType::BF16, x.data(), q.data(), 8);
    dequantize_row(GgmlType::BF16, q.data(), y.data(), 8);
    for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == bf16_to_f32(f32_to_bf16(x[i])));
}

// ---- known answers: legacy formats ------------------------------------------------------

TEST_CASE("known answer: q4_0", "[quant][kat]") {
    std::vector<uint8_t> b(18, 0x88);  // nibble 8 = 0
    put16(b, 0, kHalf);
    b[2 + 0] = 0x1F;  // x[0] = 0.5*(15-8), x[16] = 0.5*(1-8)
    b[2 + 1] = 0x80;  // x[1] = 0.5*(0-8), x[17] = 0
    const auto y = deq(GgmlType::Q4_0, b);
    std::vector<float> want(32, 0.0f);
    want[0] = 3.5f, want[16] = -3.5f, want[1] = -4.0f;
    CHECK(y == want);
}

TEST_CASE("known answer: q4_1", "[quant][kat]") {
    std::vector<uint8_t> b(20, 0);
    put16(b, 0, kHalf);
    put16(b, 2, kMinusOne);
    b[4 + 0] = 0x3A;  // x[0] = 0.5*10 - 1, x[16] = 0.5*3 - 1
    const auto y = deq(GgmlType::Q4_1, b);
    std::vector<float> want(32, -1.0f);
    want[0] = 4.0f, want[16] = 0.5f;
    CHECK(y == want);
}

TEST_CASE("known answer: q5_0", "[quant][kat]") {
    std::vector<uint8_t> b(22, 0);
    put16(b, 0, kOne);
    b[2] = 0x01, b[4] = 0x02;  // qh bits 0 and 17
    b[6 + 0] = 0x21;           // x[0] = (1|16)-16, x[16] = 2-16
    b[6 + 1] = 0x00;           // x[17] = (0|16)-16
    const auto y = deq(GgmlType::Q5_0, b);
    std::vector<float> want(32, -16.0f);
    want[0] = 1.0f, want[16] = -14.0f, want[17] = 0.0f;
    CHECK(y == want);
}

TEST_CASE("known answer: q5_1", "[quant][kat]") {
    std::vector<uint8_t> b(24, 0);
    put16(b, 0, kQuarter);
    put16(b, 2, kOne);
    b[7] = 0x80;         // qh bit 31 -> value 31
    b[8 + 15] = 0xF0;    // x[15] = 0, x[31] = 15|16
    const auto y = deq(GgmlType::Q5_1, b);
    std::vector<float> want(32, 1.0f);
    want[31] = 31 * 0.25f + 1.0f;
    CHECK(y == want);
}

TEST_CASE("known answer: q8_0", "[quant][kat]") {
    std::vector<uint8_t> b(34, 0);
    put16(b, 0, kHalf);
    for (int i = 0; i < 32; ++i) b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128));
    const auto y = deq(GgmlType::Q8_0, b);
    for (int i = 0; i < 32; ++i) CHECK(y[i] == 0.5f * static_cast<float>(i * 8 - 128));
}

// ---- known answers: K-quants ----------------------------------------------------------

TEST_CASE("known answer: q2_K", "[quant][kat]") {
    std::vector<uint8_t> b(84, 0);
    for (int s = 0; s < 16; ++s) b[s] = static_cast<uint8_t>(s | (1 << 4));  // scale s, min 1
    for (int i = 0; i < 64; ++i) b[16 + i] = 0xE4;  // 2-bit field j holds j
    put16(b, 80, kOne);   // d
    put16(b, 82, kHalf);  // dmin
    const auto y = deq(GgmlType::Q2_K, b);
    // x[e] = d * scale(e/16) * q - dmin * 1, q = ((e % 128) / 32)
    for (int e = 0; e < 256; ++e) CHECK(y[e] == static_cast<float>((e / 16) * ((e % 128) / 32)) - 0.5f);
    CHECK(y[40] == 1.5f);
    CHECK(y[200] == 23.5f);
    CHECK(y[255] == 44.5f);
}

TEST_CASE("known answer: q3_K", "[quant][kat]") {
    std::vector<uint8_t> b(110, 0);
    // hmask [0,32), qs [32,96), scales [96,108), d [108,110).
    // Scales: all 1 except S[5] = -3 and S[15] = 31 (6-bit value S + 32).
    const uint8_t scales[12] = {0x11, 0x11, 0x11, 0x11, 0x11, 0x1D, 0x11, 0xF1, 0xAA, 0xA6, 0xAA, 0xEA};
    std::memcpy(&b[96], scales, 12);
    put16(b, 108, kOne);
    b[0] |= 0x01;        // hmask: element 0 high bit
    b[32 + 0] = 0x03;    // element 0: low bits 3 -> value 3
    b[0] |= 0x20;        // hmask bit 4h+j = 5: element 128 + 32 + 0
    b[32 + 32] = 0x08;   // element 160: field j=1 of qs[32] = 2 -> value 2
    b[26] |= 0x80;       // hmask bit 7: element 128 + 96 + 26 = 250
    b[32 + 58] = 0x40;   // element 250: field j=3 of qs[58] = 1 -> value 1
    const auto y = deq(GgmlType::Q3_K, b);
    for (int e = 0; e < 256; ++e) {
        const int s = e / 16;
        const float S = s == 5 ? -3.0f : s == 15 ? 31.0f : 1.0f;
        float want = -4.0f * S;  // no high bit, low bits 0
        if (e == 0) want = 3.0f;
        if (e == 160) want = 2.0f;
        if (e == 250) want = 31.0f;
        INFO("e = " << e);
        CHECK(y[e] == want);
    }
}

namespace {
// Q4_K/Q5_K scales: sc = {1,2,3,4,17,33,50,63}, mn = {0,1,2,3,20,40,60,5}.
const uint8_t kK4Scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81, 0xC2, 0x03, 0x41, 0x81, 0xC2, 0x5F};
const int kK4Sc[8] = {1, 2, 3, 4, 17, 33, 50, 63};
const int kK4Mn[8] = {0, 1, 2, 3, 20, 40, 60, 5};
}  // namespace

TEST_CASE("known answer: q4_K", "[quant][kat]") {
    std::vector<uint8_t> b(144, 0x21);  // low nibble 1, high nibble 2
    put16(b, 0, kOne);
    put16(b, 2, kOne);
    std::memcpy(&b[4], kK4Scales, 12);
    const auto y = deq(GgmlType::Q4_K, b);
    for (int e = 0; e < 256; ++e) {
        const int j = 2 * (e / 64) + (e % 64 >= 32);
        const int q = e % 64 < 32 ? 1 : 2;
        CHECK(y[e] == static_cast<float>(kK4Sc[j] * q - kK4Mn[j]));
    }
    CHECK(y[128] == -3.0f);
    CHECK(y[160] == 26.0f);
    CHECK(y[255] == 121.0f);
}

TEST_CASE("known answer: q5_K", "[quant][kat]") {
    std::vector<uint8_t> b(176, 0);
    put16(b, 0, kHalf);
    put16(b, 2, kOne);
    std::memcpy(&b[4], kK4Scales, 12);
    b[16 + 3] = 0x81;  // qh[3]: bit 0 -> element 3, bit 7 -> element 192 + 32 + 3
    for (int i = 0; i < 128; ++i) b[48 + i] = 0x21;
    const auto y = deq(GgmlType::Q5_K, b);
    for (int e = 0; e < 256; ++e) {
        const int j = 2 * (e / 64) + (e % 64 >= 32);
        const int q = (e % 64 < 32 ? 1 : 2) + ((e == 3 || e == 227) ? 16 : 0);
        CHECK(y[e] == 0.5f * static_cast<float>(kK4Sc[j]) * static_cast<float>(q) - static_cast<float>(kK4Mn[j]));
    }
    CHECK(y[3] == 8.5f);
    CHECK(y[227] == 562.0f);
}

TEST_CASE("known answer: q6_K", "[quant][kat]") {
    std::vector<uint8_t> b(210, 0);  // ql [0,128), qh [128,192), scales [192,208), d [208,210)
    for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s - 8));
    put16(b, 208, kHalf);
    b[0] = 0x5A;          // element 0 low nibble 10, element 64 low nibble 5
    b[128 + 0] = 0xE4;    // high bits: element 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
    b[64 + 32 + 5] = 0xF0;  // second half, k=3, l=5: element 229 low nibble 15
    b[128 + 32 + 5] = 0xC0; // and its high bits 3
    const auto y = deq(GgmlType::Q6_K, b);
    for (int e = 0; e < 256; ++e) {
        float want = 0.5f * static_cast<float>(e / 16 - 8) * -32.0f;
        if (e == 0) want = 88.0f;    // 0.5 * -8 * (10 - 32)
        if (e == 32) want = 48.0f;   // 0.5 * -6 * (16 - 32)
        if (e == 64) want = -10.0f;  // 0.5 * -4 * (37 - 32)
        if (e == 96) want = -16.0f;  // 0.5 * -2 * (48 - 32)
        if (e == 229) want = 93.0f;  // 0.5 * 6 * (63 - 32)
        INFO("e = " << e);
        CHECK(y[e] == want);
    }
}

TEST_CASE("known answer: q8_K", "[quant][kat]") {
    std::vector<uint8_t> b(292, 0);
    const float d = 0.25f;
    std::memcpy(&b[0], &d, 4);
    for (int i = 0; i < 256; ++i) b[4 + i] = static_cast<uint8_t>(i);  // int8 i - 256 for i >= 128
    const auto y = deq(GgmlType::Q8_K, b);
    for (int i = 0; i < 256; ++i) CHECK(y[i] == 0.25f * static_cast<float>(static_cast<int8_t>(i)));
}

// ---- known answers: IQ formats ----------------------------------------------------------

namespace {
const float kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
}

TEST_CASE("known answer: iq4_nl", "[quant][kat]") {
    std::vector<uint8_t> b(18, 0);
    put16(b, 0, kOne);
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = deq(GgmlType::IQ4_NL, b);
    for (int j = 0; j < 16; ++j) {
        CHECK(y[j] == kIq4[j]);
        CHECK(y[j + 16] == kIq4[15 - j]);
    }
}

TEST_CASE("known answer: iq4_xs", "[quant][kat]") {
    // d [0,2), scales_h [2,4), scales_l [4,8), qs [8,136).
    // 6-bit scales ls = {32, 33, 31, 0, 63, 40, 16, 47}, i.e. l = ls - 32.
    const int l[8] = {0, 1, -1, -32, 31, 8, -16, 15};
    std::vector<uint8_t> b(136, 0xF0);  // low nibble -> -127, high nibble -> 113
    put16(b, 0, kHalf);
    put16(b, 2, 0x9B1A);
    b[4] = 0x10, b[5] = 0x0F, b[6] = 0x8F, b[7] = 0xF0;
    const auto y = deq(GgmlType::IQ4_XS, b);
    for (int sb = 0; sb < 8; ++sb) {
        for (int j = 0; j < 16; ++j) {
            CHECK(y[32 * sb + j] == 0.5f * static_cast<float>(l[sb]) * -127.0f);
            CHECK(y[32 * sb + 16 + j] == 0.5f * static_cast<float>(l[sb]) * 113.0f);
        }
    }
}

TEST_CASE("known answer: iq3_xxs", "[quant][kat]") {
    // d [0,2), grid indices [2,66), per-32 sign/scale words [66,98).
    std::vector<uint8_t> b(98, 0);
    put16(b, 0, kOne);
    b[2 + 1] = 1;    // grid 1 = {20,4,4,4}
    b[2 + 2] = 255;  // grid 255 = {4,28,52,62}
    // sign indices {1, 0, 127, 3} (ksigns 0x81, 0x00, 0xFF, 0x03), scale 3 -> db = 1.75
    put32(b, 66, 0x307FC001u);
    const auto y = deq(GgmlType::IQ3_XXS, b);
    const std::vector<float> first = {
        -7, 7, 7, 7, 35, 7, 7, -7,       // grid 0 | grid 1, signs 0x81
        7, 49, 91, 108.5f, 7, 7, 7, 7,   // grid 255 | grid 0, no signs
        -7, -7, -7, -7, -7, -7, -7, -7,  // all negative
        -7, -7, 7, 7, 7, 7, 7, 7};       // signs 0x03
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 256; ++i) CHECK(y[i] == 1.0f);  // scale 0: db = 0.25, grid value 4
}

TEST_CASE("known answer: iq3_s", "[quant][kat]") {
    // d [0,2), qs [2,66), qh [66,74), signs [74,106), scales [106,110).
    std::vector<uint8_t> b(110, 0);
    put16(b, 0, kHalf);
    b[2 + 0] = 0;         // with qh bit 0: grid 256 = {7,5,9,5}
    b[2 + 1] = 255;       // with qh bit 1: grid 511 = {1,1,15,15}
    b[2 + 2] = 1;         // grid 1 = {3,1,1,1}
    b[66 + 0] = 0x03;
    b[66 + 1] = 0x80;     // sub-block 1, group 7 (values 60..63): grid 256
    b[74 + 0] = 0x81;
    b[74 + 2] = 0x0F;
    b[74 + 7] = 0x10;     // sub-block 1, group l=3: value 4 of 8 (i.e. 60) negative
    b[106] = 0x12;        // scales 2 (db = 0.5*5) and 1 (db = 0.5*3)
    const auto y = deq(GgmlType::IQ3_S, b);
    const std::vector<float> first = {
        -17.5f, 12.5f, 22.5f, 12.5f, 2.5f, 2.5f, 37.5f, -37.5f,
        7.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f,
        -2.5f, -2.5f, -2.5f, -2.5f, 2.5f, 2.5f, 2.5f, 2.5f,
        2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f};
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 60; ++i) CHECK(y[i] == 1.5f);
    CHECK(y[60] == -10.5f);
    CHECK(y[61] == 7.5f);
    CHECK(y[62] == 13.5f);
    CHECK(y[63] == 7.5f);
    for (int i = 64; i < 256; ++i) CHECK(y[i] == 0.5f);
}

TEST_CASE("known answer: iq2_xxs", "[quant][kat]") {
    // d [0,2), then per 32 values 8 bytes: 4 grid indices, LE uint32 signs + scale.
    std::vector<uint8_t> b(66, 0);
    put16(b, 0, kOne);
    b[2 + 0] = 0, b[2 + 1] = 1, b[2 + 2] = 255, b[2 + 3] = 7;
    // sign indices {1, 0, 127, 64} (ksigns 0x81, 0, 0xFF, 0xC0), scale 1 -> db = 0.375
    put32(b, 2 + 4, 0x181FC001u);
    const auto y = deq(GgmlType::IQ2_XXS, b);
    const float a = 3.0f, m = 9.375f, h = 16.125f;  // 0.375 * {8, 25, 43}
    const std::vector<float> first = {
        -a, a, a, a, a, a, a, -a,   // grid 0, signs 0x81
        h, a, a, a, a, a, a, a,     // grid 1 = {43,8,...}
        -a, -m, -a, -a, -m, -h, -h, -h,  // grid 255 = {8,25,8,8,25,43,43,43}, all negative
        a, a, h, a, a, a, -a, -a};  // grid 7 = {8,8,43,8,...}, signs 0xC0
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 256; ++i) CHECK(y[i] == 1.0f);  // db = 0.125, grid value 8
}

TEST_CASE("known answer: iq2_xs", "[quant][kat]") {
    // d [0,2), qs uint16[32] [2,66), scales [66,74).
    std::vector<uint8_t> b(74, 0);
    put16(b, 0, kOne);
    put16(b, 2 + 0, 511 | (1 << 9));  // grid 511 (all 43), signs 0x81
    put16(b, 2 + 2, 1);               // grid 1, no signs
    put16(b, 2 + 4, 127 << 9);        // grid 0, all negative
    put16(b, 2 + 6, 1 | (64 << 9));   // grid 1, signs 0xC0
    b[66] = 0x31;                     // db = 0.375 for groups 0-1, 0.875 for groups 2-3
    const auto y = deq(GgmlType::IQ2_XS, b);
    const float h = 16.125f, a = 3.0f;
    const std::vector<float> first = {
        -h, h, h, h, h, h, h, -h,
        h, a, a, a, a, a, a, a,
        -7, -7, -7, -7, -7, -7, -7, -7,
        37.625f, 7, 7, 7, 7, 7, -7, -7};
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 256; ++i) CHECK(y[i] == 1.0f);
}

TEST_CASE("known answer: iq2_s", "[quant][kat]") {
    // d [0,2), qs [2,34), signs [34,66), qh [66,74), scales [74,82).
    std::vector<uint8_t> b(82, 0);
    put16(b, 0, kOne);
    b[2 + 0] = 0xFF;            // + qh bits 0-1 = 3: grid 1023 (all 43)
    b[2 + 1] = 0x00;            // + qh bits 2-3 = 2: grid 512 = {25,25,43,8,25,8,8,25}
    b[66] = 0x0B;
    b[34 + 0] = 0x01;           // explicit signs: odd count allowed
    b[34 + 1] = 0xFF;
    b[34 + 3] = 0x80;
    b[74] = 0x20;               // db = 0.125 (groups 0-1), 0.625 (groups 2-3)
    const auto y = deq(GgmlType::IQ2_S, b);
    const std::vector<float> first = {
        -5.375f, 5.375f, 5.375f, 5.375f, 5.375f, 5.375f, 5.375f, 5.375f,
        -3.125f, -3.125f, -5.375f, -1, -3.125f, -1, -1, -3.125f,
        5, 5, 5, 5, 5, 5, 5, 5,
        5, 5, 5, 5, 5, 5, 5, -5};
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 256; ++i) CHECK(y[i] == 1.0f);
}

// IQ1: grid entries copied from ggml-common.h (bytes are int8 values, byte j = value j):
// 1 = {1,-1,-1,-1,-1,-1,-1,-1}, 1000 = {-1,0,-1,-1,0,0,0,0}, 1024 = {0,1,-1,0,0,0,0,0},
// 2047 = all 1, 0 = all -1. x = dl * (value + delta), delta = +-1/8.
TEST_CASE("known answer: iq1_s", "[quant][kat]") {
    // d [0,2), qs [2,34), qh uint16[8] [34,50).
    std::vector<uint8_t> b(50, 0);
    put16(b, 0, kOne);
    // block 0: grid indices 1, 2047, 1000 (0x3E8), 1024 (0x400); low bytes in qs, high
    // three bits of group l at qh bits 3l..3l+2; scale 2 (dl = 5), bit 15: delta = -1/8.
    b[2 + 0] = 0x01, b[2 + 1] = 0xFF, b[2 + 2] = 0xE8, b[2 + 3] = 0x00;
    put16(b, 34, static_cast<uint16_t>(0 | 7 << 3 | 3 << 6 | 4 << 9 | 2 << 12 | 1 << 15));
    put16(b, 34 + 14, 7 << 12);  // block 7: scale 7 (dl = 15), delta +1/8, grid 0
    const auto y = deq(GgmlType::IQ1_S, b);
    const float p = 4.375f, z = -0.625f, m = -5.625f;  // 5 * (1, 0, -1 - 1/8)
    const std::vector<float> first = {
        p, m, m, m, m, m, m, m,   // grid 1
        p, p, p, p, p, p, p, p,   // grid 2047
        m, z, m, m, z, z, z, z,   // grid 1000
        z, p, m, z, z, z, z, z};  // grid 1024
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 224; ++i) CHECK(y[i] == -0.875f);  // scale 0: dl = 1, grid 0, +1/8
    for (int i = 224; i < 256; ++i) CHECK(y[i] == -13.125f);
}

TEST_CASE("known answer: iq1_m", "[quant][kat]") {
    // qs [0,32), qh [32,48), scales uint16[4] [48,56): 3-bit scale of half h at word
    // h / 4, bits 3(h % 4); fp16 d in the words' top nibbles (word k: nibble k).
    std::vector<uint8_t> b(56, 0);
    const uint16_t d = kHalf;  // 0x3800
    // halves 0, 1: scales 1, 6 (dl = 1.5, 6.5); halves 2, 3: 0, 7 (dl = 0.5, 7.5)
    put16(b, 48, static_cast<uint16_t>(1 | 6 << 3 | 0 << 6 | 7 << 9 | (d & 0xF) << 12));
    put16(b, 50, static_cast<uint16_t>(((d >> 4) & 0xF) << 12));
    put16(b, 52, static_cast<uint16_t>(((d >> 8) & 0xF) << 12));
    put16(b, 54, static_cast<uint16_t>(((d >> 12) & 0xF) << 12));
    // groups 0..3: grid 1 (+1/8), 2047 (-1/8), 1000 (-1/8), 1024 (+1/8); per group a
    // nibble of qh: index bits 8..10, bit 3 = negative delta.
    b[0] = 0x01, b[1] = 0xFF, b[2] = 0xE8, b[3] = 0x00;
    b[32] = static_cast<uint8_t>(0x0 | (7 | 8) << 4);
    b[33] = static_cast<uint8_t>((3 | 8) | 4 << 4);
    const auto y = deq(GgmlType::IQ1_M, b);
    const std::vector<float> first = {
        1.6875f, -1.3125f, -1.3125f, -1.3125f, -1.3125f, -1.3125f, -1.3125f, -1.3125f,  // 1.5 (g + 1/8)
        1.3125f, 1.3125f, 1.3125f, 1.3125f, 1.3125f, 1.3125f, 1.3125f, 1.3125f,         // 1.5 (1 - 1/8)
        -7.3125f, -0.8125f, -7.3125f, -7.3125f, -0.8125f, -0.8125f, -0.8125f, -0.8125f,  // 6.5 (g - 1/8)
        0.8125f, 7.3125f, -5.6875f, 0.8125f, 0.8125f, 0.8125f, 0.8125f, 0.8125f};        // 6.5 (g + 1/8)
    for (int i = 0; i < 32; ++i) CHECK(y[i] == first[i]);
    for (int i = 32; i < 48; ++i) CHECK(y[i] == -0.4375f);   // 0.5 * (-1 + 1/8)
    for (int i = 48; i < 64; ++i) CHECK(y[i] == -6.5625f);   // 7.5 * (-1 + 1/8)
    for (int i = 64; i < 256; ++i) CHECK(y[i] == -0.4375f);
}

// ---- grids --------------------------------------------------------------------------------

namespace {
template <typename U, size_t N>
void check_grid(const std::array<U, N>& g, iq::GridChecksum want, std::vector<uint8_t> levels) {
    CHECK(iq::checksum(g) == want);
    for (size_t i = 0; i + 1 < N; ++i) REQUIRE(g[i] < g[i + 1]);  // ggml's tables are sorted
    for (U v : g)
        for (size_t k = 0; k < sizeof(U); ++k)
            REQUIRE(std::find(levels.begin(), levels.end(), (v >> (8 * k)) & 0xFF) != levels.end());
}
}  // namespace

TEST_CASE("IQ grids match ggml's tables", "[quant][grid]") {
    check_grid(iq::kIq2xxsGrid, {0x8b267e217ce24363ull, 0x3232003211ull}, {0x08, 0x19, 0x2b});
    check_grid(iq::kIq2xsGrid, {0x2a14e555100396a1ull, 0x1100323211ull}, {0x08, 0x19, 0x2b});
    check_grid(iq::kIq2sGrid, {0x75fe5f6cc209e3f2ull, 0x2311322332323232ull}, {0x08, 0x19, 0x2b});
    check_grid(iq::kIq3xxsGrid, {0x193a8b433aull, 0x0a0a3222ull}, {4, 12, 20, 28, 36, 44, 52, 62});
    check_grid(iq::kIq3sGrid, {0xc68949e56ull, 0x0c00020eull}, {1, 3, 5, 7, 9, 11, 13, 15});
    // spot entries copied from ggml-common.h
    CHECK(iq::kIq2xxsGrid[1] == 0x080808080808082bull);
    CHECK(iq::kIq2xxsGrid[255] == 0x2b2b2b1908081908ull);
    CHECK(iq::kIq2xsGrid[511] == 0x2b2b2b2b2b2b2b2bull);
    CHECK(iq::kIq2sGrid[512] == 0x19080819082b1919ull);
    CHECK(iq::kIq3xxsGrid[1] == 0x04040414u);
    CHECK(iq::kIq3xxsGrid[255] == 0x3e341c04u);
    CHECK(iq::kIq3sGrid[256] == 0x05090507u);
    CHECK(iq::kIq3sGrid[511] == 0x0f0f0101u);
}

TEST_CASE("IQ1 grid matches ggml's table", "[quant][grid]") {
    const auto& g = iq::kIq1sGrid;
    CHECK(iq::checksum(g) == iq::GridChecksum{0x69564f615572510cull, 0xff01feff0101fefeull});
    // ggml's order: ascending in the base-3 number whose digit k is value k + 1 (value 7
    // most significant), so the entries are distinct.
    auto key = [](uint64_t v) {
        uint32_t k = 0;
        for (int j = 7; j >= 0; --j) {
            const int val = static_cast<int8_t>(v >> (8 * j));
            REQUIRE((val >= -1 && val <= 1));
            k = 3 * k + static_cast<uint32_t>(val + 1);
        }
        return k;
    };
    for (size_t i = 0; i + 1 < g.size(); ++i) REQUIRE(key(g[i]) < key(g[i + 1]));
    CHECK(g[0] == 0xffffffffffffffffull);
    CHECK(g[1] == 0xffffffffffffff01ull);
    CHECK(g[1000] == 0x00000000ffff00ffull);
    CHECK(g[1024] == 0x0000000000ff0100ull);
    CHECK(g[2047] == 0x0101010101010101ull);
}

TEST_CASE("ksigns_iq2xs", "[quant][grid]") {
    const uint8_t head[8] = {0, 129, 130, 3, 132, 5, 6, 135};
    for (int i = 0; i < 8; ++i) CHECK(iq::kSignsIq2xs[i] == head[i]);
    CHECK(iq::kSignsIq2xs[127] == 255);
    CHECK(iq::kSignsIq2xs[64] == 192);
    for (int i = 0; i < 128; ++i) {
        CHECK((iq::kSignsIq2xs[i] & 127) == i);
        CHECK(std::popcount(static_cast<unsigned>(iq::kSignsIq2xs[i])) % 2 == 0);
    }
}

TEST_CASE("grid search finds the nearest point", "[quant][grid]") {
    // Compare with brute force on random targets: exact when the snapped lattice node is
    // on the grid, otherwise within a few percent of the true nearest distance.
    const iq::GridSearch* searches[] = {&iq::iq2xxs_search(), &iq::iq2xs_search(), &iq::iq2s_search(),
                                        &iq::iq3xxs_search(), &iq::iq3s_search(), &iq::iq1s_search()};
    std::mt19937 rng(5);
    for (const iq::GridSearch* s : searches) {
        std::uniform_real_distribution<float> u(0.0f, s->max_level() * 1.1f);
        double sum_found = 0, sum_best = 0;
        for (int trial = 0; trial < 2000; ++trial) {
            float t[8];
            for (int k = 0; k < s->dim(); ++k) t[k] = u(rng);
            auto dist = [&](int idx) {
                float d2 = 0;
                for (int k = 0; k < s->dim(); ++k) d2 += (t[k] - s->point(idx)[k]) * (t[k] - s->point(idx)[k]);
                return d2;
            };
            float best = 1e30f;
            for (int i = 0; i < s->size(); ++i) best = std::min(best, dist(i));
            const float found = dist(s->nearest(t));
            REQUIRE(found >= best);
            sum_found += found;
            sum_best += best;
        }
        CHECK(sum_found <= 1.05 * sum_best);
    }
}

// ---- quantizers -------------------------------------------------------------------------

namespace {
// Round-trip RMSE bounds relative to the data's RMS on N(0,1) data (docs/quant.md).
struct Bound { GgmlType type; double rel_rmse; };
const Bound kBounds[] = {
    {GgmlType::F32, 0.0},        {GgmlType::F16, 0.0005},     {GgmlType::BF16, 0.003},
    {GgmlType::Q4_0, 0.095},     {GgmlType::Q4_1, 0.085},     {GgmlType::Q5_0, 0.047},
    {GgmlType::Q5_1, 0.042},     {GgmlType::Q8_0, 0.0065},    {GgmlType::Q2_K, 0.29},
    {GgmlType::Q3_K, 0.155},     {GgmlType::Q4_K, 0.078},     {GgmlType::Q5_K, 0.040},
    {GgmlType::Q6_K, 0.019},     {GgmlType::Q8_K, 0.008},     {GgmlType::IQ4_NL, 0.080},
    {GgmlType::IQ4_XS, 0.080},   {GgmlType::IQ3_XXS, 0.19},   {GgmlType::IQ3_S, 0.14},
    {GgmlType::IQ2_XXS, 0.345},  {GgmlType::IQ2_XS, 0.30},    {GgmlType::IQ2_S, 0.255},
    {GgmlType::IQ1_S, 0.46},     {GgmlType::IQ1_M, 0.43},
};
}  // namespace

TEST_CASE("round trip within the stated error bound", "[quant][roundtrip]") {
    REQUIRE(std::size(kBounds) == supported_types().size());
    for (const Bound& b : kBounds) {
        for (float scale : {1.0f, 0.01f, 30.0f}) {
            INFO(type_info(b.type).name << " scale " << scale);
            const auto x = gaussian(256 * 256, 42, scale);
            const auto y = round_trip(b.type, x);
            CHECK(rel_rmse(x, y) <= b.rel_rmse);
        }
    }
}

TEST_CASE("zero data quantizes to exact zeros", "[quant][roundtrip]") {
    const std::vector<float> x(512, 0.0f);
    for (GgmlType t : supported_types()) {
        INFO(type_info(t).name);
        const auto y = round_trip(t, x);
        for (float v : y) REQUIRE(v == 0.0f);
    }
}

TEST_CASE("legacy quantizers reproduce representable data exactly", "[quant][roundtrip]") {
    // d = 0.25 and the largest magnitude at the -8 / -16 / -127 end: every value is on
    // the grid, so the reference quantizers must give it back bit for bit.
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) x[i] = 0.25f * static_cast<float>(i % 16 - 8);
    CHECK(round_trip(GgmlType::Q4_0, x) == x);
    for (int i = 0; i < 64; ++i) x[i] = 0.25f * static_cast<float>(i % 32 - 16);
    CHECK(round_trip(GgmlType::Q5_0, x) == x);
    for (int i = 0; i < 64; ++i) x[i] = 0.5f * static_cast<float>((i * 37) % 255 - 127);
    x[0] = -63.5f;
    x[32] = -63.5f;
    CHECK(round_trip(GgmlType::Q8_0, x) == x);
}

TEST_CASE("q8_0 quantizer matches the reference bytes", "[quant][roundtrip]") {
    // amax = 12.7 -> d = 0.1 (fp16 0x2E66); x / d rounded half away from zero.
    std::vector<float> x(32, 0.0f);
    x[0] = 12.7f, x[1] = -0.25f, x[2] = 0.15f, x[3] = -0.05f;
    std::vector<uint8_t> q(34);
    quantize_row(GgmlType::Q8_0, x.data(), q.data(), 32);
    CHECK((q[0] | (q[1] << 8)) == f32_to_fp16(0.1f));
    CHECK(static_cast<int8_t>(q[2]) == 127);
    CHECK(static_cast<int8_t>(q[3]) == -3);  // -2.5 -> -3 (away from zero)
    CHECK(static_cast<int8_t>(q[4]) == 2);   // 1.5 -> 2 (up to f32 rounding of 0.15/0.1)
    CHECK(static_cast<int8_t>(q[5]) == -1);
}

TEST_CASE("IQ sign handling", "[quant][iq]") {
    // One group of 8 with three negatives (odd): the 7-bit sign-index formats must flip
    // the smallest-magnitude value (index 3); explicit-sign formats keep every sign.
    auto x = gaussian(256, 9);
    const float group[8] = {0.9f, -1.1f, 1.3f, 0.05f, 1.0f, 1.2f, -0.8f, -0.7f};
    std::copy(group, group + 8, x.begin() + 40);
    for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS}) {
        INFO(type_info(t).name);
        const auto y = round_trip(t, x);
        for (int j = 0; j < 8; ++j) {
            if (j == 3) CHECK(y[40 + j] < 0.0f);
            else CHECK(std::signbit(y[40 + j]) == std::signbit(group[j]));
        }
    }
    for (GgmlType t : {GgmlType::IQ2_S, GgmlType::IQ3_S}) {
        INFO(type_info(t).name);
        const auto y = round_trip(t, x);
        for (int i = 0; i < 256; ++i) CHECK(std::signbit(y[i]) == std::signbit(x[i]));
    }
}

TEST_CASE("IQ quantizers keep even sign parity per 8 values", "[quant][iq]") {
    const auto x = gaussian(256 * 4, 11);
    // every group of 8 dequantizes with an even count of negative values
    for (GgmlType t : {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS}) {
        INFO(type_info(t).name);
        const auto y = round_trip(t, x);
        for (size_t g = 0; g < y.size(); g += 8) {
            int neg = 0;
            for (int j = 0; j < 8; ++j) neg += std::signbit(y[g + j]);
            REQUIRE(neg % 2 == 0);
        }
    }
}

TEST_CASE("IQ1 quantizers reproduce representable blocks", "[quant][iq]") {
    // Random valid blocks (random grid indices, shifts and 3-bit scales, one scale at 7
    // as a quantizer leaves the largest), dequantized: quantizing those values again must
    // give them back exactly (the same floats; the bytes may differ where two encodings
    // give the same values).
    std::mt19937 rng(17);
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M}) {
        INFO(type_info(t).name);
        const size_t bs = type_info(t).type_size;
        for (int it = 0; it < 300; ++it) {
            std::vector<uint8_t> b(bs);
            for (auto& v : b) v = static_cast<uint8_t>(rng());
            const uint16_t d = f32_to_fp16(std::ldexp(1.0f + static_cast<float>(rng() % 1000) / 1000.0f,
                                                      static_cast<int>(rng() % 10) - 5));
            if (t == GgmlType::IQ1_S) {
                put16(b, 0, d);
                b[35] |= 0x70;  // block 0: scale 7
            } else {
                for (int k = 0; k < 4; ++k) {
                    uint16_t w;
                    std::memcpy(&w, &b[48 + 2 * k], 2);
                    w = static_cast<uint16_t>((w & 0x0FFF) | ((d >> (4 * k)) & 0xF) << 12);
                    if (k == 0) w |= 7;  // half 0: scale 7
                    put16(b, 48 + 2 * k, w);
                }
            }
            const auto x = deq(t, b);
            REQUIRE(round_trip(t, x) == x);
        }
    }
}

TEST_CASE("IQ1 quantizers: shifts, zero groups, non-finite input", "[quant][iq]") {
    auto x = gaussian(512, 23);
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // a zero block of 32 in a non-zero super-block
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M}) {
        INFO(type_info(t).name);
        const auto y = round_trip(t, x);
        // zeros come back as +-dl / 8, small next to the data
        for (int i = 64; i < 96; ++i) CHECK(std::fabs(y[i]) < 0.1f);
        // the super-block's error as a whole stays near the Gaussian bound
        CHECK(rel_rmse(x, y) < 0.5);
    }
    // A shift per 8 values (IQ1_M) follows the data: groups of constant +c and -c are
    // exact with every value at level 0 and the shift's sign, or level +-1.
    std::vector<float> c(256);
    for (int i = 0; i < 256; ++i) c[i] = (i / 8) % 2 ? -0.5f : 0.5f;
    const auto yc = round_trip(GgmlType::IQ1_M, c);
    for (int i = 0; i < 256; ++i) CHECK(yc[i] == Approx(c[i]).epsilon(1e-3));
    // NaN and infinities are taken as 0 (no crash, finite output).
    auto bad = gaussian(256, 24);
    bad[3] = std::nanf("");
    bad[100] = INFINITY;
    bad[200] = -INFINITY;
    for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M}) {
        const auto y = round_trip(t, bad);
        for (float v : y) CHECK(std::isfinite(v));
    }
}

// ---- argument errors ------------------------------------------------------------------

TEST_CASE("unsupported types and bad lengths throw strata::Error", "[quant][errors]") {
    std::vector<float> x(1024, 1.0f);
    std::vector<uint8_t> q(8192);
    for (GgmlType t : {GgmlType::Q8_1, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::MXFP4, GgmlType::I8,
                       GgmlType::I32, GgmlType::F64}) {
        INFO(type_info(t).name);
        CHECK_THROWS_AS(quantize_row(t, x.data(), q.data(), 256), Error);
        CHECK_THROWS_AS(dequantize_row(t, q.data(), x.data(), 256), Error);
    }
    for (uint32_t id : {4u, 5u, 31u, 36u, 40u, 99u}) {
        CHECK_THROWS_AS(dequantize_row(static_cast<GgmlType>(id), q.data(), x.data(), 256), Error);
        CHECK_THROWS_AS(quantize_row(static_cast<GgmlType>(id), x.data(), q.data(), 256), Error);
    }
    CHECK_THROWS_AS(quantize_row(GgmlType::Q4_0, x.data(), q.data(), 33), Error);
    CHECK_THROWS_AS(dequantize_row(GgmlType::Q4_0, q.data(), x.data(), 48), Error);
    CHECK_THROWS_AS(dequantize_row(GgmlType::Q4_K, q.data(), x.data(), 128), Error);
    CHECK_THROWS_AS(quantize_row(GgmlType::IQ2_XXS, x.data(), q.data(), 255), Error);
    CHECK_THROWS_AS(dequantize_row(GgmlType::Q8_0, q.data(), x.data(), -32), Error);
    try {
        dequantize_row(GgmlType::Q6_K, q.data(), x.data(), 100);
        FAIL("no throw");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("q6_K") && Catch::Contains("100"));
    }
    // n = 0 is a valid empty row
    CHECK_NOTHROW(dequantize_row(GgmlType::Q4_K, q.data(), x.data(), 0));
    CHECK_NOTHROW(quantize_row(GgmlType::F16, x.data(), q.data(), 0));
}

TEST_CASE("quant: an F16 row dequantizes every fp16 pattern exactly (the F16C path included)", "[quant][f16]") {
    std::vector<uint16_t> h(65536 + 5);  // + 5: a tail shorter than one vector
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);  // a permutation mod 2^16
    std::vector<float> y(h.size());
    dequantize_row(GgmlType::F16, h.data(), y.data(), static_cast<int64_t>(h.size()));
    size_t bad = 0;
    for (size_t i = 0; i < h.size(); ++i) bad += f32_to_bits(y[i]) != f32_to_bits(fp16_to_f32(h[i]));
    CHECK(bad == 0);
    // Every path this CPU runs, whole vectors, groups with an inf or NaN and tails alike.
    for (const int width : {1, 8, 16}) {
        if (width > quant_detail::dequant_f16_widest()) continue;
        std::fill(y.begin(), y.end(), 0.0f);
        quant_detail::dequant_f16_width(width, h.data(), y.data(), static_cast<int64_t>(h.size()));
        bad = 0;
        for (size_t i = 0; i < h.size(); ++i) bad += f32_to_bits(y[i]) != f32_to_bits(fp16_to_f32(h[i]));
        INFO(width << " values at a time");
        CHECK(bad == 0);
    }
}
