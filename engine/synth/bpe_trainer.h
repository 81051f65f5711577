// A small byte-level BPE trainer (GPT-2 / Qwen style) used to give synthetic models
// a real tokenizer: 256 byte tokens in the GPT-2 byte-to-unicode alphabet plus merges
// learned on an embedded English corpus. Fully deterministic: the most frequent pair
// wins, ties go to the lexicographically smallest (left, right) pair of token strings.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::synth {

// UTF-8 text of the code point byte b maps to (MODEL_SPEC 7.2), e.g. ' ' -> "Ġ".
const std::string& byte_to_unicode(uint8_t b);
// The 256 bytes in GPT-2 vocabulary order: the 188 printable bytes ('!'..'~',
// 0xA1..0xAC, 0xAE..0xFF) first, then the 68 remapped ones. Qwen's ids 0..255 follow it.
const std::vector<uint8_t>& gpt2_byte_order();
// Raw bytes -> byte-to-unicode string (what tokens and merges are written in).
std::string bytes_to_unicode(std::string_view raw);

// Split text into pieces with a simplified Qwen2 pre-tokenizer (MODEL_SPEC 7.3):
// contractions, words with one leading non-letter (usually the space), single
// digits, punctuation runs with an optional leading space and trailing newlines,
// whitespace runs. Bytes >= 0x80 count as letters (the corpus is English).
std::vector<std::string> pretokenize(std::string_view text);

struct BpeResult {
    std::vector<std::string> tokens;  // byte-to-unicode strings; ids 0..255 = bytes
    std::vector<std::string> merges;  // "left right", rank = index
};

// Learn merges until max_new_tokens new tokens exist or no pair occurs min_count times.
BpeResult train_bpe(std::string_view corpus, size_t max_new_tokens, int64_t min_count = 2);

// The embedded training text (engine/synth/corpus.cpp).
std::string_view embedded_corpus();

}  // namespace strata::synth
