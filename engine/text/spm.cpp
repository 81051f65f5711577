// SentencePiece BPE as llama.cpp runs it (MODEL_SPEC 7.6): start from UTF-8
// characters, repeatedly merge the adjacent pair whose concatenation is a token with
// the highest score, then spell symbols that are not tokens as <0xXX> byte tokens.
#include <queue>

#include "engine/text/tokenizer_impl.h"
#include "engine/text/unicode.h"

namespace strata {
namespace {

struct Symbol {
    size_t start, len;   // bytes of the escaped text; len 0 = merged away
    int32_t prev, next;
};

struct Bigram {
    float score;
    int32_t left, right;
    size_t len;  // combined length when pushed; differs later if a side changed
    bool operator<(const Bigram& o) const {  // priority_queue pops the largest
        return score != o.score ? score < o.score : left > o.left;  // ties: leftmost
    }
};

}  // namespace

void Tokenizer::Impl::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
    std::string s;
    s.reserve(raw.size() + 8);
    for (char c : raw) {
        if (c == ' ') s += "\xE2\x96\x81";
        else s += c;
    }

    std::vector<Symbol> sym;
    for (size_t pos = 0; pos < s.size();) {
        size_t n = text::utf8_valid_len(s, pos);
        if (n == 0) n = 1;  // an invalid byte is a symbol of its own
        auto k = static_cast<int32_t>(sym.size());
        sym.push_back({pos, n, k - 1, -1});
        if (k > 0) sym[k - 1].next = k;
        pos += n;
    }

    std::priority_queue<Bigram> heap;
    auto try_push = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        size_t len = sym[l].len + sym[r].len;
        int32_t id = lookup(std::string_view(s).substr(sym[l].start, len));
        if (id < 0) return;
        heap.push({v.scores.empty() ? 0.0f : v.scores[id], l, r, len});
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) try_push(i, i + 1);
    while (!heap.empty()) {
        Bigram b = heap.top();
        heap.pop();
        Symbol& l = sym[b.left];
        Symbol& r = sym[b.right];
        if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
        l.len += r.len;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = b.left;
        r.len = 0;
        try_push(l.prev, b.left);
        try_push(b.left, l.next);
    }

    for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
        std::string_view piece = std::string_view(s).substr(sym[i].start, sym[i].len);
        int32_t id = lookup(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (unsigned char c : piece) {
            int32_t bt = byte_token[c] >= 0 ? byte_token[c] : v.unk;
            if (bt >= 0) out.push_back(bt);
        }
    }
}

}  // namespace strata
