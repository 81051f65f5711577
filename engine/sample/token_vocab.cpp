#include "engine/sample/token_vocab.h"

#include <algorithm>
#include <numeric>

#include "engine/core/error.h"
#include "engine/text/tokenizer.h"

namespace strata {

TokenVocab::TokenVocab(std::vector<std::string> pieces, std::vector<Kind> kinds)
    : pieces_(std::move(pieces)), kinds_(std::move(kinds)) {
    if (kinds_.empty()) kinds_.assign(pieces_.size(), Kind::Text);
    STRATA_CHECK(kinds_.size() == pieces_.size(), "{} kinds for {} tokens", kinds_.size(), pieces_.size());
    for (size_t id = 0; id < pieces_.size(); ++id) {
        // A token of no bytes would let the model spin without moving the grammar on.
        if (kinds_[id] == Kind::Text && pieces_[id].empty()) kinds_[id] = Kind::Never;
        if (kinds_[id] == Kind::Eog) eog_.push_back(static_cast<int32_t>(id));
    }
    build_trie();
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok) {
    std::vector<std::string> pieces(static_cast<size_t>(tok.n_vocab()));
    std::vector<Kind> kinds(pieces.size(), Kind::Text);
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        const TokenType t = tok.token_type(id);
        if (tok.is_eog(id)) kinds[static_cast<size_t>(id)] = Kind::Eog;
        else if (t == TokenType::Control || t == TokenType::Unused) kinds[static_cast<size_t>(id)] = Kind::Never;
        else pieces[static_cast<size_t>(id)] = tok.piece(id);
    }
    return std::make_shared<const TokenVocab>(std::move(pieces), std::move(kinds));
}

// Preorder from the tokens sorted by bytes: each token adds nodes for the part of its
// bytes beyond what it shares with the previous one; a node's subtree ends when a later
// token no longer shares its prefix.
void TokenVocab::build_trie() {
    for (size_t id = 0; id < pieces_.size(); ++id)
        if (kinds_[id] == Kind::Text) trie_tokens_.push_back(static_cast<int32_t>(id));
    std::stable_sort(trie_tokens_.begin(), trie_tokens_.end(),
                     [&](int32_t a, int32_t b) { return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)]; });
    trie_.push_back({0, 0, 0, 0, 0});
    std::vector<int32_t> path{0};  // path[d]: the node at depth d on the current branch
    std::string_view prev;
    for (size_t k = 0; k < trie_tokens_.size(); ++k) {
        const std::string_view p = pieces_[static_cast<size_t>(trie_tokens_[k])];
        const auto shared = static_cast<size_t>(std::mismatch(p.begin(), p.end(), prev.begin(), prev.end()).first - p.begin());
        while (path.size() > shared + 1) {
            trie_[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie_.size());
            path.pop_back();
        }
        for (size_t d = shared; d < p.size(); ++d) {
            path.push_back(static_cast<int32_t>(trie_.size()));
            trie_.push_back({0, 0, 0, static_cast<int32_t>(d + 1), static_cast<uint8_t>(p[d])});
        }
        TrieNode& leaf = trie_[static_cast<size_t>(path.back())];
        if (leaf.tok_end == 0) leaf.tok_begin = static_cast<int32_t>(k);
        leaf.tok_end = static_cast<int32_t>(k + 1);
        max_depth_ = std::max(max_depth_, static_cast<int32_t>(p.size()));
        prev = p;
    }
    for (int32_t n : path) trie_[static_cast<size_t>(n)].end = static_cast<int32_t>(trie_.size());
}

}  // namespace strata
