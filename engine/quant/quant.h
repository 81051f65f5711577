// Block formats: reference dequantizers and quantizers for every supported type.
// Layouts are byte-exact with llama.cpp (MODEL_SPEC.md section 2), so blocks read
// from a llama.cpp file dequantize to the same floats.
#pragma once
#include <cstdint>

#include "engine/quant/types.h"

namespace strata {

// Dequantize n values (a whole number of blocks) from src into dst (f32).
// Throws strata::Error for an unsupported type or n not a multiple of the block size.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// The dequantizer of `type`: fn(src, dst, n_blocks) converts whole blocks, like
// dequantize_row without its lookup and checks, for callers that convert many short rows
// of one type (the KV cache's). Throws strata::Error for an unsupported type.
using DequantFn = void (*)(const void* src, float* dst, int64_t n_blocks);
DequantFn dequantizer(GgmlType type);

// Quantize n values (a whole number of blocks) from src into dst, row_bytes(type, n)
// bytes. The quantizers are good enough for tests and synthetic models; their error
// bounds are stated in docs/quant.md and checked by tests/test_quant.cpp.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace strata
