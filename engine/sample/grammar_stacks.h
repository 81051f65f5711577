// The pushdown automaton behind GrammarMatcher: a set of parse stacks, advanced a byte
// at a time.
//
// A stack is a chain of frames (pos, parent): pos is the next element of an alternative
// in CompiledGrammar::elems, parent the frame to return to when that alternative ends
// (-1: the end of the root). Frames are immutable and interned, so equal stacks are one
// id: a stack set is a sorted vector of ids, stacks share their tails instead of being
// copied, and two paths that reach the same stack merge (an ambiguous grammar does not
// multiply them). The top frame of every stack points at a byte set; the end of the root
// reached on the way is the set's `accepting` flag.
//
// A reference in tail position (the last element of an alternative) pushes no frame:
// its continuation would only return, so the callee returns straight to the caller's
// parent. x* and x{0,n} therefore run in constant stack depth.
//
// Speculative work (checking a token, walking the vocabulary for a mask) interns frames
// after a mark() and drops them with rollback(), so the store only grows with the text
// actually accepted; compact() rebuilds it around the live stacks when that grows large.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sample/compiled_grammar.h"

namespace strata {

struct StackSet {
    std::vector<int32_t> tops;  // interned top frames, sorted, distinct
    bool accepting = false;     // the input so far is a whole sentence of the grammar

    bool dead() const { return tops.empty() && !accepting; }
    bool operator==(const StackSet&) const = default;
};

class StackStore {
public:
    // Guards against grammars whose ambiguity would make a step unboundedly expensive.
    static constexpr size_t kMaxStacks = 1 << 14;
    static constexpr size_t kMaxClosure = 1 << 18;

    explicit StackStore(const CompiledGrammar& g);

    void start(StackSet& out);  // before any input
    // out: the stacks of `in` that accept b, each advanced and expanded to byte tops.
    void advance(const StackSet& in, uint8_t b, StackSet& out);

    struct Mark {
        size_t frames;
        uint64_t rehashes;
    };
    Mark mark() const { return {frames_.size(), rehashes_}; }
    void rollback(Mark m);  // forgets every frame interned since m

    size_t frames() const { return frames_.size(); }
    // Re-interns only the frames `live` uses, renumbering its ids.
    void compact(StackSet& live);

private:
    struct Frame {
        int32_t pos, parent;
    };

    int32_t intern(int32_t pos, int32_t parent);
    void expand(int32_t pos, int32_t parent, StackSet& out);
    void rehash(size_t capacity);
    int32_t copy_into(StackStore& to, int32_t frame) const;

    const CompiledGrammar* g_;
    std::vector<Frame> frames_;
    std::vector<uint32_t> slot_of_;   // per frame: its slot in table_
    std::vector<int32_t> table_;      // open addressing, linear probing; -1 empty
    uint64_t rehashes_ = 0;
    std::vector<Frame> work_;         // expand()'s pending (pos, parent) pairs
};

}  // namespace strata
