#include "engine/serve/prompt_store.h"

#include <algorithm>

#include "engine/core/buffer.h"
#include "engine/core/error.h"

namespace strata {

struct PromptStore::Block : std::enable_shared_from_this<Block> {
    PromptStore* store = nullptr;
    std::shared_ptr<Block> parent;
    std::vector<int32_t> tokens;  // block_ of them
    Buffer kv;                    // their rows, Runner::KvRange's layout with cap = block_
    uint64_t hash = 0;
    ~Block() { store->drop(this); }
};

struct PromptStore::Entry {
    std::vector<int32_t> tokens;                // every position it holds
    std::vector<std::shared_ptr<Block>> chain;  // tokens' whole blocks
    Buffer tail_kv;                             // the rest (cap = its length)
    Buffer recurrent;                           // the state at tokens.size() (empty: none)
    std::vector<float> mtp_row;                 // the hidden row of the last position (empty: none)
    size_t own_bytes = 0;                       // tail and recurrent state
    uint64_t used = 0;                          // LRU clock
    int64_t n() const { return static_cast<int64_t>(tokens.size()); }
};

namespace {

// Memory for a copy of a state: pages the kernel zeroes as they are first written, 2 MiB
// ones from a megabyte up (HugeBuffer). A recurrent state is megabytes (3.2 MiB for the
// small qwen3next preset, ~72 MiB for a 48-layer Qwen3-Next), copied out at every save:
// in zero-filled 4 KiB pages that was a fill and then a fault per page, ~1700 faults a
// request on the small preset, in the scheduler's loop.
Buffer state_bytes(size_t n) { return n > 0 ? host_buffer(n) : Buffer(); }
uint8_t* bytes_of(const Buffer& b) { return static_cast<uint8_t*>(b.data()); }

uint64_t block_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
    uint64_t h = parent_hash ^ 0x9e3779b97f4a7c15ull;
    for (int32_t t : tokens) {  // FNV-1a over the ids, then a final mix
        h ^= static_cast<uint32_t>(t);
        h *= 0x100000001b3ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
    const size_t n = std::min(a.size(), b.size());
    return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
                               a.begin());
}

}  // namespace

PromptStore::PromptStore(size_t budget_bytes, size_t kv_pos, size_t recurrent, int64_t block)
    : budget_(budget_bytes), kv_pos_(kv_pos), recurrent_(recurrent), block_(block) {
    STRATA_CHECK(block >= 1, "prompt store: blocks of {} positions", block);
    counts_.budget = budget_bytes;
}

// The entries go first: their blocks leave the index (still alive) as they die.
PromptStore::~PromptStore() { entries_.clear(); }

void PromptStore::drop(Block* b) {
    auto [lo, hi] = index_.equal_range(b->hash);
    for (auto it = lo; it != hi; ++it)
        if (it->second == b) {
            index_.erase(it);
            break;
        }
    bytes_ -= b->kv.size();
    --counts_.blocks;
}

std::shared_ptr<PromptStore::Block> PromptStore::child(const Block* parent, std::span<const int32_t> tokens) const {
    auto [lo, hi] = index_.equal_range(block_hash(parent ? parent->hash : 0, tokens));
    for (auto it = lo; it != hi; ++it) {
        Block* b = it->second;
        if (b->parent.get() == parent && std::equal(tokens.begin(), tokens.end(), b->tokens.begin(), b->tokens.end()))
            return b->shared_from_this();
    }
    return nullptr;
}

PromptStore::Match PromptStore::match(std::span<const int32_t> tokens, int64_t limit) const {
    limit = std::min<int64_t>(limit, static_cast<int64_t>(tokens.size()));
    Match best;
    if (limit <= 0) return best;
    const std::span<const int32_t> want = tokens.first(static_cast<size_t>(limit));
    for (const auto& e : entries_) {
        const auto c = static_cast<int64_t>(common_prefix(e->tokens, want));
        // A recurrent state holds the whole past: only the entry's own length will do.
        const int64_t n = recurrent_ > 0 ? (c == e->n() ? c : 0) : c;
        if (n > best.n || (n == best.n && n > 0 && e->used > best.entry->used)) best = {n, e};
    }
    return best;
}

void PromptStore::touch(const Entry& e) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->get() == &e) {
            (*it)->used = ++clock_;
            entries_.splice(entries_.end(), entries_, it);  // most recently used last
            return;
        }
}

void PromptStore::load(Runner& runner, int seq, const Match& m) {
    STRATA_CHECK(m.entry && m.n > 0 && m.n <= m.entry->n(), "prompt store: nothing to load");
    const Entry& e = *m.entry;
    STRATA_CHECK(recurrent_ == 0 || m.n == e.n(), "prompt store: a recurrent state is only valid at {} positions", e.n());
    std::vector<Runner::KvRange> kv;
    for (size_t i = 0; i < e.chain.size(); ++i) {
        const int64_t p0 = static_cast<int64_t>(i) * block_;
        if (p0 >= m.n) break;
        kv.push_back({p0, std::min(p0 + block_, m.n), bytes_of(e.chain[i]->kv), block_});
    }
    const int64_t t0 = static_cast<int64_t>(e.chain.size()) * block_;
    if (m.n > t0)
        kv.push_back({t0, m.n, bytes_of(e.tail_kv), e.n() - t0});
    runner.load_state(seq, kv, recurrent_ > 0 ? bytes_of(e.recurrent) : nullptr, m.n);
    touch(e);
    ++counts_.loads;
    counts_.loaded_tokens += m.n;
}

void PromptStore::evict_one() {
    STRATA_CHECK(!entries_.empty(), "prompt store: nothing to evict");
    bytes_ -= entries_.front()->own_bytes;
    entries_.pop_front();  // its blocks go with it unless another entry shares them
    ++counts_.evictions;
}

std::span<const float> PromptStore::mtp_row(const Match& m) const {
    if (!m.entry || m.n != m.entry->n()) return {};
    return m.entry->mtp_row;
}

bool PromptStore::save(Runner& runner, int seq, std::span<const int32_t> tokens, std::span<const float> mtp_row) {
    const auto n = static_cast<int64_t>(tokens.size());
    if (n == 0) return false;
    STRATA_CHECK(runner.n_past(seq) == n, "prompt store: sequence {} holds {} positions, not {}", seq, runner.n_past(seq), n);
    // Already there: an entry at exactly these tokens, or (attention only) one that goes
    // on from them.
    for (const auto& e : entries_) {
        const size_t c = common_prefix(e->tokens, tokens);
        if (c == tokens.size() && (recurrent_ == 0 || e->n() == n)) {
            touch(*e);
            return true;
        }
    }
    // The blocks already stored are shared; the rest is copied out.
    auto entry = std::make_shared<Entry>();
    entry->tokens.assign(tokens.begin(), tokens.end());
    const int64_t whole = n / block_;
    std::vector<size_t> fresh;  // chain indices of new blocks
    const Block* parent = nullptr;
    for (int64_t i = 0; i < whole; ++i) {
        std::shared_ptr<Block> b = child(parent, tokens.subspan(static_cast<size_t>(i * block_), static_cast<size_t>(block_)));
        if (!b) fresh.push_back(entry->chain.size());
        entry->chain.push_back(b);
        parent = b ? b.get() : nullptr;
        if (!b) {  // no stored child of a new block: the rest is new too
            for (int64_t j = i + 1; j < whole; ++j) {
                fresh.push_back(entry->chain.size());
                entry->chain.push_back(nullptr);
            }
            break;
        }
    }
    const int64_t tail = n - whole * block_;
    const size_t block_bytes = static_cast<size_t>(block_) * kv_pos_;
    const size_t own = static_cast<size_t>(tail) * kv_pos_ + recurrent_ + mtp_row.size_bytes();
    const size_t need = fresh.size() * block_bytes + own;
    if (need > budget_) return false;
    while (bytes_ + need > budget_ && !entries_.empty()) evict_one();
    if (bytes_ + need > budget_) return false;  // what it shares is all that is left and still too much

    std::vector<Runner::KvRange> kv;
    for (size_t i : fresh) {
        auto b = std::make_shared<Block>();
        b->store = this;
        b->parent = i > 0 ? entry->chain[i - 1] : nullptr;
        const auto p0 = static_cast<int64_t>(i) * block_;
        b->tokens.assign(tokens.begin() + p0, tokens.begin() + p0 + block_);
        b->hash = block_hash(b->parent ? b->parent->hash : 0, b->tokens);
        b->kv = state_bytes(block_bytes);
        kv.push_back({p0, p0 + block_, bytes_of(b->kv), block_});
        entry->chain[i] = b;
        bytes_ += block_bytes;  // drop() gives it back
        ++counts_.blocks;
    }
    entry->tail_kv = state_bytes(static_cast<size_t>(tail) * kv_pos_);
    if (tail > 0) kv.push_back({whole * block_, n, bytes_of(entry->tail_kv), tail});
    entry->recurrent = state_bytes(recurrent_);
    entry->mtp_row.assign(mtp_row.begin(), mtp_row.end());
    runner.save_state(seq, kv, recurrent_ > 0 ? bytes_of(entry->recurrent) : nullptr);  // a throw frees the new blocks
    for (size_t i : fresh) index_.emplace(entry->chain[i]->hash, entry->chain[i].get());
    entry->own_bytes = own;
    bytes_ += own;
    // Attention only: the shorter entries this one goes on from are covered by it.
    if (recurrent_ == 0)
        for (auto it = entries_.begin(); it != entries_.end();) {
            if (common_prefix((*it)->tokens, tokens) == (*it)->tokens.size()) {
                bytes_ -= (*it)->own_bytes;
                it = entries_.erase(it);
            } else {
                ++it;
            }
        }
    entry->used = ++clock_;
    entries_.push_back(std::move(entry));
    ++counts_.saves;
    return true;
}

PromptStore::Stats PromptStore::stats() const {
    Stats s = counts_;
    s.bytes = bytes_;
    s.entries = static_cast<int64_t>(entries_.size());
    return s;
}

}  // namespace strata
