// A GGUF metadata value: every scalar type, strings, and (nested) arrays.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace strata {

enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

std::string_view gguf_type_name(GgufType t);

struct GgufArray;

// A value keeps the exact type it was written with (so a UINT32 stays a UINT32 when
// it is written back). Integer getters accept any integer type and range-check.
class GgufValue {
public:
    GgufValue() = default;
    static GgufValue u8(uint8_t v) { return GgufValue(GgufType::UINT8, v); }
    static GgufValue i8(int8_t v) { return GgufValue(GgufType::INT8, v); }
    static GgufValue u16(uint16_t v) { return GgufValue(GgufType::UINT16, v); }
    static GgufValue i16(int16_t v) { return GgufValue(GgufType::INT16, v); }
    static GgufValue u32(uint32_t v) { return GgufValue(GgufType::UINT32, v); }
    static GgufValue i32(int32_t v) { return GgufValue(GgufType::INT32, v); }
    static GgufValue u64(uint64_t v) { return GgufValue(GgufType::UINT64, v); }
    static GgufValue i64(int64_t v) { return GgufValue(GgufType::INT64, v); }
    static GgufValue f32(float v) { return GgufValue(GgufType::FLOAT32, static_cast<double>(v)); }
    static GgufValue f64(double v) { return GgufValue(GgufType::FLOAT64, v); }
    static GgufValue boolean(bool v) { return GgufValue(GgufType::BOOL, v); }
    static GgufValue str(std::string v) { return GgufValue(GgufType::STRING, std::move(v)); }
    // An array: elem_type is the element type; every element must have that type.
    static GgufValue array(GgufType elem_type, std::vector<GgufValue> elems);
    static GgufValue str_array(const std::vector<std::string>& v);
    static GgufValue i32_array(const std::vector<int32_t>& v);
    static GgufValue f32_array(const std::vector<float>& v);

    GgufType type() const { return type_; }
    bool is_integer() const;
    bool is_float() const { return type_ == GgufType::FLOAT32 || type_ == GgufType::FLOAT64; }

    // Checked accessors; `what` names the key in the error message.
    int64_t as_int(std::string_view what = "value") const;
    uint64_t as_uint(std::string_view what = "value") const;
    double as_float(std::string_view what = "value") const;  // accepts ints too
    bool as_bool(std::string_view what = "value") const;
    const std::string& as_string(std::string_view what = "value") const;
    GgufType array_type(std::string_view what = "value") const;
    const std::vector<GgufValue>& as_array(std::string_view what = "value") const;

    // Short human-readable rendering (arrays are abbreviated past max_elems).
    std::string to_string(size_t max_elems = 8) const;

    // Raw storage, for the reader and writer.
    using Storage = std::variant<std::monostate, uint64_t, int64_t, double, bool, std::string,
                                 std::vector<GgufValue>>;
    const Storage& storage() const { return v_; }
    GgufType elem_type() const { return elem_; }

private:
    GgufValue(GgufType t, uint64_t v) : type_(t), v_(v) {}
    GgufValue(GgufType t, int64_t v) : type_(t), v_(v) {}
    GgufValue(GgufType t, uint8_t v) : type_(t), v_(static_cast<uint64_t>(v)) {}
    GgufValue(GgufType t, uint16_t v) : type_(t), v_(static_cast<uint64_t>(v)) {}
    GgufValue(GgufType t, uint32_t v) : type_(t), v_(static_cast<uint64_t>(v)) {}
    GgufValue(GgufType t, int8_t v) : type_(t), v_(static_cast<int64_t>(v)) {}
    GgufValue(GgufType t, int16_t v) : type_(t), v_(static_cast<int64_t>(v)) {}
    GgufValue(GgufType t, int32_t v) : type_(t), v_(static_cast<int64_t>(v)) {}
    GgufValue(GgufType t, double v) : type_(t), v_(v) {}
    GgufValue(GgufType t, bool v) : type_(t), v_(v) {}
    GgufValue(GgufType t, std::string v) : type_(t), v_(std::move(v)) {}

    GgufType type_ = GgufType::UINT8;
    GgufType elem_ = GgufType::UINT8;  // element type when type_ == ARRAY
    Storage v_;
};

}  // namespace strata
