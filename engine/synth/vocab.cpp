#include "engine/synth/vocab.h"

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/synth/bpe_trainer.h"

namespace strata::synth {

namespace {

struct Added {
    const char* text;
    TokenType type;
};

// Qwen2/Qwen3 added tokens in their id order, with the type llama.cpp assigns
// (MODEL_SPEC 7.1: "<|...|>" and HF-special -> CONTROL, other added -> USER_DEFINED).
constexpr Added kAdded[] = {
    {"<|endoftext|>", kControl},       {"<|im_start|>", kControl},        {"<|im_end|>", kControl},
    {"<|object_ref_start|>", kControl}, {"<|object_ref_end|>", kControl}, {"<|box_start|>", kControl},
    {"<|box_end|>", kControl},         {"<|quad_start|>", kControl},      {"<|quad_end|>", kControl},
    {"<|vision_start|>", kControl},    {"<|vision_end|>", kControl},      {"<|vision_pad|>", kControl},
    {"<|image_pad|>", kControl},       {"<|video_pad|>", kControl},       {"<tool_call>", kUserDefined},
    {"</tool_call>", kUserDefined},    {"<|fim_prefix|>", kControl},      {"<|fim_middle|>", kControl},
    {"<|fim_suffix|>", kControl},      {"<|fim_pad|>", kControl},         {"<|repo_name|>", kControl},
    {"<|file_sep|>", kControl},        {"<tool_response>", kUserDefined}, {"</tool_response>", kUserDefined},
    {"<think>", kUserDefined},         {"</think>", kUserDefined},
};

}  // namespace

int64_t n_added_tokens() { return static_cast<int64_t>(std::size(kAdded)); }

SynthVocab build_vocab(int64_t n_vocab) {
    const int64_t min_vocab = 256 + n_added_tokens();
    if (n_vocab < min_vocab)
        fail("vocabulary size {} is too small: 256 byte tokens + {} added tokens need at least {}", n_vocab,
             n_added_tokens(), min_vocab);
    BpeResult bpe = train_bpe(embedded_corpus(), static_cast<size_t>(n_vocab - min_vocab));
    SynthVocab v;
    v.n_learned = static_cast<int64_t>(bpe.tokens.size()) - 256;
    v.tokens = std::move(bpe.tokens);
    v.merges = std::move(bpe.merges);
    v.types.assign(v.tokens.size(), kNormal);
    const auto first_added = static_cast<int32_t>(v.tokens.size());
    for (const Added& a : kAdded) {
        v.tokens.emplace_back(a.text);
        v.types.push_back(a.type);
    }
    // Real vocabularies are padded to a round size (Qwen: "[PAD...]" UNUSED rows);
    // UNUSED tokens are never matched as specials and never produced.
    for (int64_t i = 0; static_cast<int64_t>(v.tokens.size()) < n_vocab; ++i) {
        v.tokens.push_back(fmt::format("<|reserved_{}|>", i));
        v.types.push_back(kUnused);
    }
    v.bos = first_added;      // <|endoftext|> (Qwen: bos = pad = endoftext)
    v.eos = first_added + 2;  // <|im_end|> (Instruct/Thinking models stop on it)
    v.pad = first_added;
    return v;
}

std::vector<std::pair<std::string, GgufValue>> tokenizer_metadata(const SynthVocab& v) {
    std::vector<std::pair<std::string, GgufValue>> kv;
    kv.emplace_back("tokenizer.ggml.model", GgufValue::str("gpt2"));
    kv.emplace_back("tokenizer.ggml.pre", GgufValue::str("qwen2"));
    kv.emplace_back("tokenizer.ggml.tokens", GgufValue::str_array(v.tokens));
    kv.emplace_back("tokenizer.ggml.token_type", GgufValue::i32_array(v.types));
    kv.emplace_back("tokenizer.ggml.merges", GgufValue::str_array(v.merges));
    kv.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(v.bos)));
    kv.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(v.eos)));
    kv.emplace_back("tokenizer.ggml.padding_token_id", GgufValue::u32(static_cast<uint32_t>(v.pad)));
    kv.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
    kv.emplace_back("tokenizer.chat_template", GgufValue::str(std::string(qwen_chat_template())));
    return kv;
}

}  // namespace strata::synth
