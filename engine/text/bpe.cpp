// Byte-level BPE (MODEL_SPEC 7.4 steps 2-4): pre-tokenize, then merge each piece
// with a min-heap of candidate pairs ordered by (rank, position).
#include <queue>

#include "engine/text/tokenizer_impl.h"
#include "engine/text/unicode.h"

namespace strata {
namespace {

struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
};

struct Candidate {
    int32_t rank;
    int32_t left, right;          // symbol indices
    int32_t left_id, right_id;    // ids when pushed: a later merge makes the entry stale
    int32_t result;
    bool operator>(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : left > o.left;  // ties: leftmost first
    }
};

using Heap = std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>>;

}  // namespace

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<std::string_view> words;
    regex->split(text, words);

    std::vector<Symbol> sym;
    for (std::string_view w : words) {
        if (pre_info.ignore_merges) {
            int32_t id = lookup(text::bytes_to_byte_level(w));
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        // One symbol per byte: each byte is exactly one character of the byte-level
        // alphabet, so this equals "one symbol per code point" of the mapped string.
        sym.clear();
        for (size_t i = 0; i < w.size(); ++i) {
            int32_t id = byte_token[static_cast<uint8_t>(w[i])];
            if (id < 0) id = v.unk;  // only in vocabularies that lack byte tokens
            if (id < 0) continue;
            auto k = static_cast<int32_t>(sym.size());
            sym.push_back({id, k - 1, -1});
            if (k > 0) sym[k - 1].next = k;
        }
        if (sym.size() > 1) {
            Heap heap;
            auto try_push = [&](int32_t l, int32_t r) {
                if (l < 0 || r < 0) return;
                uint64_t key = (static_cast<uint64_t>(sym[l].id) << 32) |
                               static_cast<uint32_t>(sym[r].id);
                auto it = merges.find(key);
                if (it != merges.end())
                    heap.push({it->second.rank, l, r, sym[l].id, sym[r].id, it->second.result});
            };
            for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) try_push(i, i + 1);
            while (!heap.empty()) {
                Candidate c = heap.top();
                heap.pop();
                Symbol& l = sym[c.left];
                // Stale: one side was merged away or changed since this entry was pushed.
                if (l.id != c.left_id || l.next != c.right || sym[c.right].id != c.right_id)
                    continue;
                Symbol& r = sym[c.right];
                l.id = c.result;
                l.next = r.next;
                if (r.next >= 0) sym[r.next].prev = c.left;
                r.id = -1;  // dead
                try_push(l.prev, c.left);
                try_push(c.left, l.next);
            }
        }
        for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
    }
}

}  // namespace strata
