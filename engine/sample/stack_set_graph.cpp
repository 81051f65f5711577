#include "engine/sample/stack_set_graph.h"

namespace strata {

int32_t StackSetGraph::add(const StackSet& s) {
    key_.assign(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * sizeof(int32_t));
    key_ += s.accepting ? 'a' : 'n';
    auto [it, added] = ids_.emplace(key_, static_cast<int32_t>(sets_.size()));
    if (added) sets_.push_back(s);
    return it->second;
}

int32_t StackSetGraph::next(StackStore& store, int32_t from, uint8_t b) {
    const uint64_t key = (static_cast<uint64_t>(from) << 8) | b;
    if (auto it = transitions_.find(key); it != transitions_.end()) return it->second;
    store.advance(sets_[static_cast<size_t>(from)], b, scratch_);
    const int32_t to = add(scratch_);
    transitions_.emplace(key, to);
    return to;
}

void StackSetGraph::clear() {
    sets_.clear();
    ids_.clear();
    transitions_.clear();
}

}  // namespace strata
