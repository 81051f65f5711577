// Internal state of Tokenizer, shared by tokenizer.cpp (setup, specials, decoding),
// bpe.cpp and spm.cpp (the two encoders). Not part of the public interface.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/text/pretokenizer.h"
#include "engine/text/tokenizer.h"

namespace strata {

struct Tokenizer::Impl {
    TokenizerVocab v;
    bool is_spm = false;
    bool add_bos = false;
    text::PreTokenizerInfo pre_info{text::PreType::Gpt2, true, false};
    std::optional<text::Regex> regex;  // BPE only

    // Keys view into v.tokens, which never changes after construction.
    std::unordered_map<std::string_view, int32_t> token_to_id;
    std::vector<std::string> pieces;  // decoded bytes per id
    // BPE: the token of each byte's byte-level character. SPM: the <0xXX> token.
    std::array<int32_t, 256> byte_token{};

    struct Merge {
        int32_t rank;
        int32_t result;
    };
    // (left id << 32 | right id) -> merge. Ids rather than strings: lookups in the
    // merge loop then hash one integer instead of building a string.
    std::unordered_map<uint64_t, Merge> merges;

    // Special tokens matched when parse_special: longest text first, indexed by the
    // first byte so the scan only tries candidates at plausible positions.
    std::array<std::vector<int32_t>, 256> specials_by_first_byte;

    std::vector<char> eog;  // per id
    std::vector<int32_t> eog_list;

    TokenType type(int32_t id) const {
        return v.types.empty() ? TokenType::Normal : static_cast<TokenType>(v.types[id]);
    }
    int32_t lookup(std::string_view s) const {
        auto it = token_to_id.find(s);
        return it == token_to_id.end() ? -1 : it->second;
    }

    // Encoders for one raw-text fragment (no special tokens inside); append to out.
    void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
    void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace strata
