// The tokenizer section of a synthetic model: a Qwen2-style byte-level BPE vocabulary
// (MODEL_SPEC 7.1) with the Qwen added tokens and a ChatML chat template (7.5).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/gguf/value.h"

namespace strata::synth {

// tokenizer.ggml.token_type values (llama.cpp llama_token_type).
enum TokenType : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

struct SynthVocab {
    // Ids: [0, 256) byte tokens in GPT-2 order, then learned merges, then the Qwen
    // added tokens (<|endoftext|>, <|im_start|>, ...), then "<|reserved_N|>" padding
    // (UNUSED) up to the requested size, the same order a Qwen GGUF has.
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    std::vector<std::string> merges;
    int64_t n_learned = 0;  // tokens made by merges
    int32_t bos = 0, eos = 0, pad = 0;
};

// The number of added (special) tokens, so the smallest vocabulary is 256 + this.
int64_t n_added_tokens();

// Build a vocabulary of exactly n_vocab tokens; learned tokens fill what is left
// after bytes and added tokens, until the corpus runs out of repeated pairs.
SynthVocab build_vocab(int64_t n_vocab);

// Qwen3's ChatML Jinja template (thinking-aware, with tool calls).
std::string_view qwen_chat_template();

// tokenizer.* metadata keys for this vocabulary, in the order they are written.
std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(const SynthVocab& v);

}  // namespace strata::synth
