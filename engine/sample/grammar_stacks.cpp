#include "engine/sample/grammar_stacks.h"

#include <algorithm>

#include "engine/core/error.h"

namespace strata {

namespace {

using Op = CompiledGrammar::Op;

uint32_t hash_frame(int32_t pos, int32_t parent) {
    uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
    k *= 0x9E3779B97F4A7C15ull;
    return static_cast<uint32_t>(k >> 32);
}

}  // namespace

StackStore::StackStore(const CompiledGrammar& g) : g_(&g) { rehash(1 << 12); }

void StackStore::rehash(size_t capacity) {
    table_.assign(capacity, -1);
    const size_t mask = capacity - 1;
    for (size_t id = 0; id < frames_.size(); ++id) {
        size_t s = hash_frame(frames_[id].pos, frames_[id].parent) & mask;
        while (table_[s] >= 0) s = (s + 1) & mask;
        table_[s] = static_cast<int32_t>(id);
        slot_of_[id] = static_cast<uint32_t>(s);
    }
    ++rehashes_;
}

int32_t StackStore::intern(int32_t pos, int32_t parent) {
    const size_t mask = table_.size() - 1;
    size_t s = hash_frame(pos, parent) & mask;
    for (; table_[s] >= 0; s = (s + 1) & mask) {
        const Frame& f = frames_[static_cast<size_t>(table_[s])];
        if (f.pos == pos && f.parent == parent) return table_[s];
    }
    const auto id = static_cast<int32_t>(frames_.size());
    frames_.push_back({pos, parent});
    slot_of_.push_back(static_cast<uint32_t>(s));
    table_[s] = id;
    if (frames_.size() * 2 > table_.size()) rehash(table_.size() * 2);
    return id;
}

void StackStore::rollback(Mark m) {
    if (m.rehashes != rehashes_) {
        // Frames moved: rebuild from the ones kept (rare: the table doubles).
        frames_.resize(m.frames);
        slot_of_.resize(m.frames);
        rehash(table_.size());
        return;
    }
    // Inserting only ever filled empty slots, so emptying them restores the table.
    for (size_t id = m.frames; id < frames_.size(); ++id) table_[slot_of_[id]] = -1;
    frames_.resize(m.frames);
    slot_of_.resize(m.frames);
}

// Follows (pos, parent) through references and returns until every path stops at a
// byte set (a top) or at the end of the root (accepting).
void StackStore::expand(int32_t pos, int32_t parent, StackSet& out) {
    const auto& elems = g_->elems;
    work_.clear();
    work_.push_back({pos, parent});
    size_t steps = 0;
    while (!work_.empty()) {
        if (++steps > kMaxClosure) fail("grammar: too ambiguous (one step expands to more than {} paths)", kMaxClosure);
        const Frame w = work_.back();
        work_.pop_back();
        const CompiledGrammar::Elem e = elems[static_cast<size_t>(w.pos)];
        if (e.op == Op::Byte) {
            out.tops.push_back(intern(w.pos, w.parent));
        } else if (e.op == Op::End) {
            if (w.parent < 0) out.accepting = true;
            else work_.push_back(frames_[static_cast<size_t>(w.parent)]);
        } else {
            // Tail position: the callee returns straight to our parent.
            const int32_t ret = elems[static_cast<size_t>(w.pos) + 1].op == Op::End ? w.parent : intern(w.pos + 1, w.parent);
            for (int32_t start : g_->alts[static_cast<size_t>(e.arg)]) work_.push_back({start, ret});
        }
    }
}

void StackStore::start(StackSet& out) {
    out.tops.clear();
    out.accepting = false;
    for (int32_t a : g_->alts[static_cast<size_t>(g_->root)]) expand(a, -1, out);
    std::sort(out.tops.begin(), out.tops.end());
    out.tops.erase(std::unique(out.tops.begin(), out.tops.end()), out.tops.end());
}

void StackStore::advance(const StackSet& in, uint8_t b, StackSet& out) {
    out.tops.clear();
    out.accepting = false;
    for (int32_t top : in.tops) {
        const Frame f = frames_[static_cast<size_t>(top)];
        if (g_->sets[static_cast<size_t>(g_->elems[static_cast<size_t>(f.pos)].arg)].has(b)) expand(f.pos + 1, f.parent, out);
    }
    if (out.tops.size() > 1) {
        std::sort(out.tops.begin(), out.tops.end());
        out.tops.erase(std::unique(out.tops.begin(), out.tops.end()), out.tops.end());
    }
    if (out.tops.size() > kMaxStacks) fail("grammar: too ambiguous (more than {} parses alive at once)", kMaxStacks);
}

int32_t StackStore::copy_into(StackStore& to, int32_t frame) const {
    // Parents first, iteratively: stacks can be as deep as the text is long.
    std::vector<int32_t> chain;
    for (int32_t f = frame; f >= 0; f = frames_[static_cast<size_t>(f)].parent) chain.push_back(f);
    int32_t parent = -1;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) parent = to.intern(frames_[static_cast<size_t>(*it)].pos, parent);
    return parent;
}

void StackStore::compact(StackSet& live) {
    StackStore fresh(*g_);
    for (int32_t& top : live.tops) top = copy_into(fresh, top);
    std::sort(live.tops.begin(), live.tops.end());
    *this = std::move(fresh);
}

}  // namespace strata
