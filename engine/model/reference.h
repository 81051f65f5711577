// A plain float64 forward pass straight from the GGUF, with no caches, no threads and
// no shared code with the optimized path: the yardstick the tests hold the engine to.
// Meant for the tiny presets (it dequantizes every weight to double).
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

class GgufFile;

// Logits [T][n_vocab] for tokens at positions 0..T-1 (dense llama / qwen3).
std::vector<std::vector<double>> reference_forward(const GgufFile& f, const std::vector<int32_t>& tokens);

}  // namespace strata
