// The scheduler's prompt cache (docs/server.md "Prompt cache"): which free slot a prompt
// takes, how much of it a slot's sequence or the host store (prompt_store.h) already
// holds, and the recurrent-state checkpoints of hybrid models.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine/serve/scheduler.h"

namespace strata {

size_t Scheduler::reusable(const Slot& s, const std::vector<int32_t>& prompt) const {
    // The state must hold what the slot remembers (an engine restart empties them all).
    if (!opt_.prompt_cache || prompt.empty() || s.cached.empty() || runner_.n_past(s.seq) != static_cast<int64_t>(s.cached.size()))
        return 0;
    const size_t n = std::min(s.cached.size(), prompt.size() - 1);  // the last token is fed: its logits are needed
    const size_t c = static_cast<size_t>(std::mismatch(s.cached.begin(), s.cached.begin() + static_cast<std::ptrdiff_t>(n),
                                                       prompt.begin()).first - s.cached.begin());
    // A recurrent state is the whole past: usable when the prompt goes on from all of it,
    // or from the checkpoint taken at the end of the last prompt.
    if (runner_.model().hp().hybrid() && c < s.cached.size()) return s.checkpoint > 0 && c >= s.checkpoint ? s.checkpoint : 0;
    return c;
}

void Scheduler::checkpoint(Slot& s) {
    if (!opt_.prompt_cache || !runner_.model().hp().hybrid()) return;
    const std::span<const int32_t> done(s.req.prompt.data(), s.prompt_done);
    // A speculative slot's saved state holds the MTP's pairs below its last position, and
    // that position's hidden row goes with it.
    std::span<const float> row;
    if (store_ && s.spec) {
        try {
            feed_mtp(s);
            const size_t E = static_cast<size_t>(runner_.model().hp().n_embd);
            row = std::span<const float>(s.prompt_hidden).subspan((s.prompt_done - 1 - s.mtp_base) * E, E);
        } catch (const std::exception& ex) {
            spdlog::warn("engine: feeding the MTP the prompt of sequence {} failed: {}", s.seq, ex.what());
        }
    }
    if (s.in_prompt()) {  // every cache_every tokens: the host store only
        save_to_store(s, done, row);
        return;
    }
    // The prompt is in: the state is saved here for the next turn, on the device (the
    // speculative decoder owns the snapshot when it runs) and in the host store.
    if (!s.spec) {
        try {
            runner_.snapshot(s.seq);
            s.checkpoint = s.req.prompt.size();
        } catch (const std::exception& ex) {
            spdlog::warn("engine: saving the prompt's state of sequence {} failed: {}", s.seq, ex.what());
            s.checkpoint = 0;
        }
    }
    save_to_store(s, done, row);
}

void Scheduler::feed_mtp(Slot& s) {
    const int64_t last = static_cast<int64_t>(s.prompt_done) - 1, E = runner_.model().hp().n_embd;
    for (int64_t p0 = s.mtp_from; p0 < last;) {
        const int64_t n = std::min<int64_t>(last - p0, opt_.n_batch);
        runner_.mtp(s.seq, s.prompt_hidden.data() + (p0 - s.mtp_base) * E, s.req.prompt.data() + p0 + 1, n, p0,
                    nullptr, nullptr, 0);
        p0 += n;
        s.mtp_from = p0;
    }
}

void Scheduler::save_to_store(Slot& s, std::span<const int32_t> tokens, std::span<const float> mtp_row) {
    if (!store_) return;
    try {
        store_->save(runner_, s.seq, tokens, mtp_row);
    } catch (const std::exception& ex) {
        spdlog::warn("engine: keeping the state of sequence {} in host memory failed: {}", s.seq, ex.what());
    }
    std::lock_guard lk(mu_);
    store_stats_ = store_->stats();
}

size_t Scheduler::chunk_room(const Slot& s, size_t room) const {
    const size_t left = s.req.prompt.size() - s.prompt_done;
    size_t n = std::min(left, room);
    if (store_ && opt_.cache_every > 0 && runner_.model().hp().hybrid()) {
        // Chunks end at the checkpoints, so the recurrent state passes through them.
        const auto every = static_cast<size_t>(opt_.cache_every);
        const size_t next = (s.prompt_done / every + 1) * every;
        if (next < s.req.prompt.size()) n = std::min(n, next - s.prompt_done);
    }
    return n;
}

Slot& Scheduler::pick_slot(const std::vector<int32_t>& prompt, PromptStore::Match* hit) {
    Slot* best = nullptr;
    size_t best_reuse = 0;
    for (Slot& s : slots_) {
        if (s.busy()) continue;
        const size_t r = reusable(s, prompt);
        if (!best || r > best_reuse || (r == best_reuse && s.last_used < best->last_used)) {
            best = &s;
            best_reuse = r;
        }
    }
    STRATA_CHECK(best != nullptr, "no free slot for an admitted request");
    *hit = {};
    if (!store_ || !opt_.prompt_cache || prompt.empty()) return *best;
    // The host store, when it holds more of the prompt than any free slot: the least
    // recently used free slot takes it (its own state goes to the store first).
    PromptStore::Match m = store_->match(prompt, static_cast<int64_t>(prompt.size()) - 1);
    if (m.n <= static_cast<int64_t>(best_reuse)) return *best;
    *hit = std::move(m);
    for (Slot& s : slots_)
        if (!s.busy() && s.last_used < best->last_used) best = &s;
    return *best;
}

}  // namespace strata
