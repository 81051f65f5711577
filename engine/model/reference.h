// A plain float64 forward pass straight from the GGUF, with no caches, no threads and
// no shared code with the optimized path: the yardstick the tests hold the engine to.
// Meant for the tiny presets (it dequantizes every weight to double).
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

class GgufFile;

// Logits [T][n_vocab] for tokens at positions 0..T-1 (llama, qwen3, qwen3moe, qwen3next). For
// qwen3next the Gated DeltaNet runs the plain recurrence of MODEL_SPEC 4.5 in double.
std::vector<std::vector<double>> reference_forward(const GgufFile& f, const std::vector<int32_t>& tokens);

// qwen3next MTP block (MODEL_SPEC 4.11.2) over the pairs (hidden[t], next_tokens[t]) at
// positions 0..T-1, its KV cache starting empty: logits [T][n_vocab] and the chained
// hidden state (after the block's final norm) [T][n_embd].
struct MtpReference {
    std::vector<std::vector<double>> logits, hidden;
};
MtpReference reference_mtp(const GgufFile& f, const std::vector<std::vector<double>>& hidden,
                           const std::vector<int32_t>& next_tokens);

}  // namespace strata
