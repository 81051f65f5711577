#include "engine/sample/grammar_matcher.h"

#include <algorithm>
#include <limits>

#include "engine/core/error.h"

namespace strata {

namespace {

// Above this many interned frames a commit compacts the store around the live stacks
// (a long generation otherwise keeps every frame it ever made).
constexpr size_t kCompactAt = size_t{1} << 20;

// Drops the frames a check or a mask interned, also when it throws, unless kept.
class Scratch {
public:
    explicit Scratch(StackStore& s) : store_(s), mark_(s.mark()) {}
    ~Scratch() {
        if (!kept_) store_.rollback(mark_);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void keep() { kept_ = true; }

private:
    StackStore& store_;
    StackStore::Mark mark_;
    bool kept_ = false;
};

std::string printable(std::string_view bytes) {
    std::string out;
    for (unsigned char c : bytes) {
        if (c >= 0x20 && c < 0x7f && c != '\\') out += static_cast<char>(c);
        else out += fmt::format("\\x{:02x}", c);
    }
    return out;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), store_(*grammar_),
      levels_(static_cast<size_t>(vocab_->max_depth()) + 1) {
    reset();
}

void GrammarMatcher::reset() {
    store_ = StackStore(*grammar_);
    store_.start(state_);
    finished_ = false;
    cache_.clear();  // the cached states' frame ids belonged to the old store
    cache_next_ = 0;
}

const StackSet* GrammarMatcher::walk(const StackSet& from, std::string_view bytes) {
    const StackSet* cur = &from;
    for (size_t i = 0; i < bytes.size(); ++i) {
        StackSet& next = step_[i & 1];
        store_.advance(*cur, static_cast<uint8_t>(bytes[i]), next);
        if (next.dead()) return nullptr;
        cur = &next;
    }
    return cur;
}

void GrammarMatcher::commit(const StackSet& next) {
    state_ = next;
    if (store_.frames() > kCompactAt) {
        store_.compact(state_);
        cache_.clear();
        cache_next_ = 0;
    }
}

bool GrammarMatcher::accepts_bytes(std::string_view bytes) {
    if (finished_) return bytes.empty();
    Scratch scratch(store_);
    return walk(state_, bytes) != nullptr;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (finished_) return bytes.empty();
    Scratch scratch(store_);
    const StackSet* next = walk(state_, bytes);
    if (!next) return false;
    scratch.keep();
    commit(*next);
    return true;
}

bool GrammarMatcher::accepts_token(int32_t id) {
    if (id < 0 || id >= vocab_->size() || finished_) return false;
    switch (vocab_->kind(id)) {
    case TokenVocab::Kind::Eog: return complete();
    case TokenVocab::Kind::Never: return false;
    case TokenVocab::Kind::Text: return accepts_bytes(vocab_->piece(id));
    }
    return false;
}

void GrammarMatcher::accept_token(int32_t id) {
    STRATA_CHECK(id >= 0 && id < vocab_->size(), "token id {} out of range [0, {})", id, vocab_->size());
    const TokenVocab::Kind kind = vocab_->kind(id);
    if (kind == TokenVocab::Kind::Eog && complete()) {
        finished_ = true;
        return;
    }
    if (kind != TokenVocab::Kind::Text || !accept_bytes(vocab_->piece(id)))
        fail("grammar: token {} ('{}') is not allowed here", id, printable(vocab_->piece(id)));
}

const TokenMask* GrammarMatcher::cached_mask() const {
    for (const CachedMask& c : cache_)
        if (c.state == state_) return &c.mask;
    return nullptr;
}

// Depth-first over the trie in preorder: levels_[d] holds the stack set after the d
// bytes of the current prefix, so each node costs one transition from its parent's set
// (mostly a lookup in graph_), and a refused prefix skips its whole subtree.
void GrammarMatcher::walk_trie(TokenMask& mask) {
    const auto trie = vocab_->trie();
    const auto tokens = vocab_->trie_tokens();
    Scratch scratch(store_);
    struct ClearGraph {  // before the scratch frames its sets name are rolled back
        StackSetGraph& g;
        ~ClearGraph() { g.clear(); }
    } clear_graph{graph_};
    levels_[0] = graph_.add(state_);
    size_t i = 1;
    while (i < trie.size()) {
        const TokenVocab::TrieNode& node = trie[i];
        const int32_t here = graph_.next(store_, levels_[static_cast<size_t>(node.depth) - 1], node.byte);
        const StackSet& set = graph_.set(here);
        if (set.dead()) {
            i = static_cast<size_t>(node.end);
            continue;
        }
        levels_[static_cast<size_t>(node.depth)] = here;
        for (int32_t k = node.tok_begin; k < node.tok_end; ++k) {
            const auto id = static_cast<size_t>(tokens[static_cast<size_t>(k)]);
            mask[id >> 6] |= uint64_t{1} << (id & 63);
        }
        // Complete with nothing left to read: no longer token can follow this prefix.
        i = set.tops.empty() ? static_cast<size_t>(node.end) : i + 1;
    }
}

void GrammarMatcher::fill_mask(TokenMask& mask) {
    if (const TokenMask* hit = finished_ ? nullptr : cached_mask()) {
        mask = *hit;
        return;
    }
    mask.assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
    if (finished_) return;
    if (state_.accepting)
        for (int32_t id : vocab_->eog()) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    walk_trie(mask);
    if (cache_.size() < kMaskCache) {
        cache_.push_back({state_, mask});
    } else {
        cache_[cache_next_] = {state_, mask};
        cache_next_ = (cache_next_ + 1) % kMaskCache;
    }
}

void GrammarMatcher::apply_mask(std::span<float> logits) {
    STRATA_CHECK(logits.size() == static_cast<size_t>(vocab_->size()), "{} logits for a vocabulary of {}",
                 logits.size(), vocab_->size());
    fill_mask(mask_scratch_);
    for (size_t id = 0; id < logits.size(); ++id)
        if (!((mask_scratch_[id >> 6] >> (id & 63)) & 1)) logits[id] = -std::numeric_limits<float>::infinity();
}

}  // namespace strata
