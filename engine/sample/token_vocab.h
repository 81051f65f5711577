// A vocabulary as the grammar matcher sees it: each token's bytes and whether it may
// ever be emitted under a grammar, plus a byte trie of the tokens for computing masks.
// Built once per tokenizer and shared (immutable) by every matcher.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class Tokenizer;

class TokenVocab {
public:
    enum class Kind : uint8_t {
        Text,   // its bytes go through the grammar
        Eog,    // end of generation: allowed exactly when the grammar is complete
        Never,  // control tokens, and tokens of no bytes: never allowed
    };

    // The trie in preorder: a node's subtree is [its index, end); node 0 is the root
    // (the empty prefix). Tokens whose bytes end at a node are trie_tokens()[tok_begin,
    // tok_end) (a real vocabulary can spell one string twice).
    struct TrieNode {
        int32_t end;
        int32_t tok_begin, tok_end;
        int32_t depth;  // bytes from the root
        uint8_t byte;   // the byte that leads here from the parent
    };

    // kinds empty: every token is Text. A Text token of no bytes becomes Never.
    TokenVocab(std::vector<std::string> pieces, std::vector<Kind> kinds);
    // CONTROL and UNUSED tokens are Never unless they end generation (Tokenizer::is_eog).
    static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok);

    int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
    std::string_view piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
    Kind kind(int32_t id) const { return kinds_[static_cast<size_t>(id)]; }
    const std::vector<int32_t>& eog() const { return eog_; }

    std::span<const TrieNode> trie() const { return trie_; }
    std::span<const int32_t> trie_tokens() const { return trie_tokens_; }
    int32_t max_depth() const { return max_depth_; }

private:
    void build_trie();

    std::vector<std::string> pieces_;
    std::vector<Kind> kinds_;
    std::vector<int32_t> eog_;
    std::vector<TrieNode> trie_;
    std::vector<int32_t> trie_tokens_;  // Text tokens sorted by their bytes
    int32_t max_depth_ = 0;
};

}  // namespace strata
