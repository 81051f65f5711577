#include "engine/gguf/value.h"

#include <fmt/format.h>

#include <limits>

#include "engine/core/error.h"

namespace strata {

std::string_view gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::UINT8: return "u8";
        case GgufType::INT8: return "i8";
        case GgufType::UINT16: return "u16";
        case GgufType::INT16: return "i16";
        case GgufType::UINT32: return "u32";
        case GgufType::INT32: return "i32";
        case GgufType::FLOAT32: return "f32";
        case GgufType::BOOL: return "bool";
        case GgufType::STRING: return "string";
        case GgufType::ARRAY: return "array";
        case GgufType::UINT64: return "u64";
        case GgufType::INT64: return "i64";
        case GgufType::FLOAT64: return "f64";
    }
    return "unknown";
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> elems) {
    for (const auto& e : elems)
        STRATA_CHECK(e.type() == elem_type, "array element of type {} in an array of {}",
                     gguf_type_name(e.type()), gguf_type_name(elem_type));
    GgufValue v;
    v.type_ = GgufType::ARRAY;
    v.elem_ = elem_type;
    v.v_ = std::move(elems);
    return v;
}

GgufValue GgufValue::str_array(const std::vector<std::string>& v) {
    std::vector<GgufValue> e;
    e.reserve(v.size());
    for (const auto& s : v) e.push_back(str(s));
    return array(GgufType::STRING, std::move(e));
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
    std::vector<GgufValue> e;
    e.reserve(v.size());
    for (int32_t x : v) e.push_back(i32(x));
    return array(GgufType::INT32, std::move(e));
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
    std::vector<GgufValue> e;
    e.reserve(v.size());
    for (float x : v) e.push_back(f32(x));
    return array(GgufType::FLOAT32, std::move(e));
}

bool GgufValue::is_integer() const {
    switch (type_) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
        case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

int64_t GgufValue::as_int(std::string_view what) const {
    if (const auto* u = std::get_if<uint64_t>(&v_)) {
        if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            fail("{}: value {} does not fit in int64", what, *u);
        return static_cast<int64_t>(*u);
    }
    if (const auto* i = std::get_if<int64_t>(&v_)) return *i;
    fail("{}: expected an integer, found {}", what, gguf_type_name(type_));
}

uint64_t GgufValue::as_uint(std::string_view what) const {
    if (const auto* u = std::get_if<uint64_t>(&v_)) return *u;
    if (const auto* i = std::get_if<int64_t>(&v_)) {
        if (*i < 0) fail("{}: expected a non-negative integer, found {}", what, *i);
        return static_cast<uint64_t>(*i);
    }
    fail("{}: expected an integer, found {}", what, gguf_type_name(type_));
}

double GgufValue::as_float(std::string_view what) const {
    if (const auto* d = std::get_if<double>(&v_)) return *d;
    if (is_integer()) return type_ == GgufType::UINT64 || type_ == GgufType::UINT32 ||
                                     type_ == GgufType::UINT16 || type_ == GgufType::UINT8
                                 ? static_cast<double>(as_uint(what))
                                 : static_cast<double>(as_int(what));
    fail("{}: expected a number, found {}", what, gguf_type_name(type_));
}

bool GgufValue::as_bool(std::string_view what) const {
    if (const auto* b = std::get_if<bool>(&v_)) return *b;
    fail("{}: expected a bool, found {}", what, gguf_type_name(type_));
}

const std::string& GgufValue::as_string(std::string_view what) const {
    if (const auto* s = std::get_if<std::string>(&v_)) return *s;
    fail("{}: expected a string, found {}", what, gguf_type_name(type_));
}

GgufType GgufValue::array_type(std::string_view what) const {
    if (type_ != GgufType::ARRAY) fail("{}: expected an array, found {}", what, gguf_type_name(type_));
    return elem_;
}

const std::vector<GgufValue>& GgufValue::as_array(std::string_view what) const {
    if (const auto* a = std::get_if<std::vector<GgufValue>>(&v_)) return *a;
    fail("{}: expected an array, found {}", what, gguf_type_name(type_));
}

std::string GgufValue::to_string(size_t max_elems) const {
    return std::visit(
        [&](const auto& x) -> std::string {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::monostate>) {
                return "<empty>";
            } else if constexpr (std::is_same_v<T, std::string>) {
                std::string s = x.size() > 80 ? x.substr(0, 77) + "..." : x;
                std::string out = "\"";
                for (char c : s) {
                    if (c == '\n') out += "\\n";
                    else if (c == '"') out += "\\\"";
                    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", c);
                    else out += c;
                }
                return out + "\"";
            } else if constexpr (std::is_same_v<T, std::vector<GgufValue>>) {
                std::string out = fmt::format("[{} x {}: ", x.size(), gguf_type_name(elem_));
                for (size_t i = 0; i < x.size() && i < max_elems; ++i)
                    out += (i ? ", " : "") + x[i].to_string(max_elems);
                if (x.size() > max_elems) out += ", ...";
                return out + "]";
            } else if constexpr (std::is_same_v<T, bool>) {
                return x ? "true" : "false";
            } else {
                return fmt::format("{}", x);
            }
        },
        v_);
}

}  // namespace strata
