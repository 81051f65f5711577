// Pre-tokenizers of byte-level BPE vocabularies (MODEL_SPEC 7.3): a PCRE2 regex with
// Unicode classes splits raw text into pieces that BPE then merges independently.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Owns the pcre2 handle.
// Matching is const and thread-safe: match data is allocated per call.
class Regex {
public:
    explicit Regex(const std::string& pattern);
    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;
    ~Regex();

    // Appends the consecutive pieces of `text`: every match, and every gap between
    // matches as one piece, so the pieces always cover `text` exactly. Bytes that are
    // not valid UTF-8 never match (PCRE2_MATCH_INVALID_UTF) and land in gap pieces.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

    bool jit() const { return jit_; }

private:
    struct Code;
    std::unique_ptr<Code> code_;
    bool jit_ = false;
};

enum class PreType { Gpt2, Qwen2, Qwen35, LlamaBpe };

struct PreTokenizerInfo {
    PreType type;
    bool recognized;     // false: unknown tokenizer.ggml.pre, fell back to gpt2
    bool ignore_merges;  // llama-bpe: a piece that is itself a token skips BPE
};

// Maps tokenizer.ggml.pre to a pre-tokenizer (aliases as in llama.cpp).
PreTokenizerInfo pre_tokenizer_for(std::string_view pre_name);

// The regex for a pre-tokenizer type.
const std::string& pre_tokenizer_pattern(PreType type);

}  // namespace strata::text
