// The prompt cache's host-RAM level (--cache-ram): copies of sequences' states, kept
// after their slot moved on to another conversation, so that a conversation (or an agent
// loop) that comes back finds its history without reprocessing it. The slots' own
// sequences are the first level (scheduler.cpp); this store is the second.
//
// KV rows are kept in blocks of kBlock positions, each keyed by its tokens and its
// parent block (a tree of token prefixes, as vLLM's prefix caching hashes its blocks), so
// conversations sharing a system prompt, and the checkpoints of one conversation, share
// their rows. An entry is a point a sequence can be put back at: a chain of blocks, a
// tail of fewer than kBlock positions, and (models with Gated DeltaNet layers) the
// recurrent state at that point, which is only valid there. An attention-only model can
// go back to any prefix of an entry. Entries are dropped least recently used first to
// stay within the budget; a block lives while an entry uses it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/run/runner.h"

namespace strata {

class PromptStore {
public:
    static constexpr int64_t kBlock = 256;

    // kv_pos / recurrent: Runner::kv_bytes_per_pos(), Runner::recurrent_bytes(). With a
    // recurrent state, an entry is usable only at its own length.
    PromptStore(size_t budget_bytes, size_t kv_pos, size_t recurrent, int64_t block = kBlock);
    ~PromptStore();
    PromptStore(const PromptStore&) = delete;
    PromptStore& operator=(const PromptStore&) = delete;

    struct Block;
    struct Entry;
    // How much of a prompt the store can put back, and from which entry.
    struct Match {
        int64_t n = 0;  // positions (0: nothing)
        std::shared_ptr<const Entry> entry;
    };
    // The longest prefix of tokens[0, limit) that can be put back.
    Match match(std::span<const int32_t> tokens, int64_t limit) const;
    // Copies m into seq, which then holds m.n positions; marks the entry used.
    void load(Runner& runner, int seq, const Match& m);
    // Saves seq, which holds exactly `tokens`: new blocks, the tail and the recurrent state
    // are copied out, shared blocks are not. False when it cannot fit in the budget (or
    // holds nothing worth keeping); an attention-only entry that a longer one covers is
    // not saved again, and replaces the shorter entries it covers.
    // mtp_row (empty: none): the target's hidden row of the last position, kept with the
    // entry for the MTP drafter, whose pairs below that position the state holds (the
    // scheduler's MTP catch-up, docs/server.md).
    bool save(Runner& runner, int seq, std::span<const int32_t> tokens, std::span<const float> mtp_row = {});
    // The hidden row saved with m's entry, when m goes back to the entry's whole length
    // (empty otherwise).
    std::span<const float> mtp_row(const Match& m) const;

    struct Stats {
        size_t bytes = 0, budget = 0;
        int64_t entries = 0, blocks = 0;
        int64_t saves = 0, loads = 0, evictions = 0;
        int64_t loaded_tokens = 0;  // positions put back by load()
    };
    Stats stats() const;

private:
    std::shared_ptr<Block> child(const Block* parent, std::span<const int32_t> tokens) const;
    void touch(const Entry& e);
    void evict_one();
    void drop(Block* b);  // a block's destructor: out of the index and the count

    size_t budget_, kv_pos_, recurrent_;
    int64_t block_;
    size_t bytes_ = 0;
    uint64_t clock_ = 0;
    Stats counts_;
    // Blocks by (parent, tokens) hash; several per hash on a collision.
    std::unordered_multimap<uint64_t, Block*> index_;
    std::list<std::shared_ptr<Entry>> entries_;  // least recently used first; after index_
};

}  // namespace strata
