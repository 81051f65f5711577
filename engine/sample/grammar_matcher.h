// Constrained decoding: which tokens may come next under a grammar.
//
// A GrammarMatcher follows one generated text through a compiled grammar. Two ways to
// ask it about the next token:
//  - accepts_token(id): one token, a few bytes of work: the check a sampler makes first
//    on the token it would pick anyway (sample_constrained in constrained.h);
//  - fill_mask(): every token at once, by walking the vocabulary's byte trie with the
//    parse state, dropping a whole subtree as soon as its prefix is refused, and
//    computing each distinct (stack set, byte) step once (stack_set_graph.h). Masks are
//    cached per parse state (up to kMaskCache of them), so a state that repeats, as the
//    inside of a string does, costs the walk once.
// Text tokens pass when the grammar takes all their bytes; end-of-generation tokens pass
// when the text so far is complete; control tokens never pass.
//
// Not thread-safe (checks use scratch space); one matcher per sequence, sharing the
// compiled grammar and the vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/sample/compiled_grammar.h"
#include "engine/sample/grammar_stacks.h"
#include "engine/sample/stack_set_graph.h"
#include "engine/sample/token_vocab.h"

namespace strata {

// Bit id of word id / 64: token id is allowed.
using TokenMask = std::vector<uint64_t>;
inline bool mask_allows(const TokenMask& m, int32_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

class GrammarMatcher {
public:
    static constexpr size_t kMaskCache = 32;

    GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const TokenVocab> vocab);

    // Bytes. accept_bytes takes all of them or, returning false, none.
    bool accepts_bytes(std::string_view bytes);
    bool accept_bytes(std::string_view bytes);
    // The text so far is a whole sentence of the grammar: generation may end here.
    bool complete() const { return !finished_ && state_.accepting; }
    // An end-of-generation token was accepted: nothing more is.
    bool finished() const { return finished_; }

    // Tokens.
    bool accepts_token(int32_t id);
    void accept_token(int32_t id);  // throws strata::Error when the grammar refuses it
    void fill_mask(TokenMask& mask);
    // Sets the logits of refused tokens to -infinity (logits.size() == vocabulary size).
    void apply_mask(std::span<float> logits);

    void reset();  // back to the start, before any text
    const TokenVocab& vocab() const { return *vocab_; }

private:
    // Advances `from` through bytes into scratch levels; the result, or null when refused.
    const StackSet* walk(const StackSet& from, std::string_view bytes);
    void commit(const StackSet& next);
    void walk_trie(TokenMask& mask);
    const TokenMask* cached_mask() const;

    struct CachedMask {
        StackSet state;
        TokenMask mask;
    };

    std::shared_ptr<const CompiledGrammar> grammar_;
    std::shared_ptr<const TokenVocab> vocab_;
    StackStore store_;
    StackSet state_;
    bool finished_ = false;
    StackSet step_[2];              // scratch of walk(): the state after odd / even bytes
    StackSetGraph graph_;           // scratch of walk_trie()
    std::vector<int32_t> levels_;   // scratch of walk_trie(): graph_'s set at trie depth d
    std::vector<CachedMask> cache_;
    size_t cache_next_ = 0;  // the entry to replace next (round robin)
    TokenMask mask_scratch_;
};

}  // namespace strata
