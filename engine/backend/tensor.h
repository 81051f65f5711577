// A tensor view: memory of one device (host memory for the CPU backend, device memory
// for a GPU's), its element type and a 2-D shape with a row stride. Ops take views and
// never own memory; the model plans which buffer each view points into.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/quant/types.h"

namespace strata {

struct Tensor {
    void* data = nullptr;
    GgmlType type = GgmlType::F32;
    int64_t ne0 = 0;  // values per row (contiguous)
    int64_t ne1 = 0;  // rows
    size_t nb1 = 0;   // bytes between rows

    // rows x n f32 values, row r at p + r * ld (ld = n when 0).
    static Tensor f32(float* p, int64_t n, int64_t rows, int64_t ld = 0) {
        return {p, GgmlType::F32, n, rows, sizeof(float) * static_cast<size_t>(ld > 0 ? ld : n)};
    }
    static Tensor f32(const float* p, int64_t n, int64_t rows, int64_t ld = 0) {
        return f32(const_cast<float*>(p), n, rows, ld);  // views carry no constness; ops document what they write
    }

    float* f() const { return static_cast<float*>(data); }
    float* row(int64_t r) const { return reinterpret_cast<float*>(static_cast<uint8_t*>(data) + static_cast<size_t>(r) * nb1); }
    int64_t ld() const { return static_cast<int64_t>(nb1 / sizeof(float)); }  // row stride in floats
    bool contiguous() const { return nb1 == sizeof(float) * static_cast<size_t>(ne0); }
    // Rows [r0, r0 + n).
    Tensor rows(int64_t r0, int64_t n) const { return {row(r0), type, ne0, n, nb1}; }
};

}  // namespace strata
