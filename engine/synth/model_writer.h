// Synthetic GGUF models: random weights with sane scales, the metadata keys and
// tensor names llama.cpp uses for llama / qwen3 / qwen3next, and a real tokenizer.
// Same options -> same bytes, whatever the thread count (per-tensor seeds).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/value.h"
#include "engine/gguf/writer.h"
#include "engine/quant/types.h"
#include "engine/synth/presets.h"
#include "engine/synth/tensor_plan.h"

namespace strata::synth {

struct SynthOptions {
    Arch arch = Arch::Llama;
    Preset preset = Preset::Tiny;
    GgmlType type = GgmlType::F16;  // weight matrices; everything else stays F32
    uint64_t seed = 0;
    bool mtp = false;               // qwen3next only
    bool rope_freqs = false;        // write rope_freqs.weight (--rope-freqs)
    double yarn_factor = 0;         // --yarn FACTOR (0 = none)
    // qwen3next + mtp: a predictable model (predictable.h) whose MTP agrees with the
    // main model's greedy next token on this fraction of the tokens (--mtp-agree).
    std::optional<double> mtp_agree;
    GdnLayout gdn_layout = GdnLayout::Split;
    int64_t vocab_size = 0;         // 0 = the preset's default
    int64_t layers = 0;             // main layers (--layers); 0 = the preset's
    int threads = 2;                // generation threads (does not change the bytes)
};

ModelConfig config_for(const SynthOptions& o);

// llama.cpp's general.file_type (llama_ftype) for a file whose weights are `t`;
// nullopt for types that are not a weight format (q8_1, q8_K, integer types, ...).
std::optional<uint32_t> llama_file_type(GgmlType t);

struct SynthModel {
    ModelConfig config;
    std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
    std::vector<TensorPlan> tensors;                          // in file order
    std::vector<std::vector<uint8_t>> data;                   // one blob per tensor
    std::vector<std::string> notes;                           // type fallbacks
    int64_t n_params = 0;
    int64_t n_learned_tokens = 0;
};

// Generate a whole model in memory (the 1b presets need ~1.2 GB at q8_0, 4.4 GB at f32).
SynthModel build_model(const SynthOptions& o);
// Same, for a config built or tweaked by the caller.
SynthModel build_model(const ModelConfig& c, GgmlType type, uint64_t seed, int threads = 2);

// Generate one tensor's bytes (deterministic in (seed, name)). Not for Init::Derived.
std::vector<uint8_t> generate_tensor(const TensorPlan& t, const ModelConfig& c, uint64_t seed);

// n values of src stored as one row of `type` (row_bytes(type, n) bytes at dst).
void encode_row(GgmlType type, const float* src, uint8_t* dst, int64_t n);

// general.* and {arch}.* keys (MODEL_SPEC 1.7, 3.1, 5.1, 5.5), without the tokenizer.
std::vector<std::pair<std::string, GgufValue>> model_metadata(const ModelConfig& c, GgmlType type,
                                                              bool any_quantized, uint64_t seed);

// Move the model into a writer (no copy of the tensor data).
GgufWriter make_writer(SynthModel&& m);
// A model with an MTP block as two files, as llama.cpp's converter writes them with
// --no-mtp and --mtp (docs/qwen35.md 2.10): the main file without the block (block_count
// of the main stack, no nextn key), and an MTP-only sidecar with the full metadata, the
// embedding table, the output norm, the head and the block.
std::pair<GgufWriter, GgufWriter> make_writers_mtp_apart(SynthModel&& m);

}  // namespace strata::synth
