// A lazily built automaton over stack sets, for one mask computation: each distinct
// stack set gets an id, and each (set, byte) transition is computed by the StackStore
// once and then looked up. Walking a vocabulary trie meets the same few sets again and
// again (inside a string, every character leads back to the same set), so most trie
// nodes cost one hash lookup instead of an advance.
//
// The ids name frames interned during the walk: clear() before the store rolls back.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sample/grammar_stacks.h"

namespace strata {

class StackSetGraph {
public:
    int32_t add(const StackSet& s);
    // The set after byte b from set `from` (it may be dead()).
    int32_t next(StackStore& store, int32_t from, uint8_t b);
    const StackSet& set(int32_t id) const { return sets_[static_cast<size_t>(id)]; }
    void clear();

private:
    std::vector<StackSet> sets_;
    std::unordered_map<std::string, int32_t> ids_;        // a set's bytes -> its id
    std::unordered_map<uint64_t, int32_t> transitions_;   // id << 8 | byte -> id
    StackSet scratch_;
    std::string key_;
};

}  // namespace strata
