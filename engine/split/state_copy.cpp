#include "engine/split/state_copy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/split/split_runner_impl.h"

namespace strata::split_detail {

size_t kv_pos_bytes(const SeqState& s) {
    if (!s.kv) return 0;
    return static_cast<size_t>(s.kv->n_layers() * s.kv->n_head_kv()) * (s.kv->k_stride() + s.kv->v_stride());
}

size_t recurrent_bytes(const SeqState& s) { return s.gdn ? s.gdn->bytes() : 0; }

namespace {

// Calls f(device rows, host rows, bytes) for every run of the range, in the layout order.
template <class KvCacheT, class F>
void each_run(KvCacheT& kv, const Runner::KvRange& r, F&& f) {
    STRATA_CHECK(r.p0 >= 0 && r.p0 <= r.p1 && r.p1 <= kv.n_ctx() && r.p1 - r.p0 <= r.cap,
                 "state copy: positions [{}, {}) with room for {} in a context of {}", r.p0, r.p1, r.cap, kv.n_ctx());
    const auto n = static_cast<size_t>(r.p1 - r.p0), cap = static_cast<size_t>(r.cap);
    uint8_t* host = r.host;
    for (int64_t l = 0; l < kv.n_layers(); ++l)
        for (int64_t h = 0; h < kv.n_head_kv(); ++h) {
            f(kv.k_head(l, h) + static_cast<size_t>(r.p0) * kv.k_stride(), host, n * kv.k_stride());
            host += cap * kv.k_stride();
            f(kv.v_head(l, h) + static_cast<size_t>(r.p0) * kv.v_stride(), host, n * kv.v_stride());
            host += cap * kv.v_stride();
        }
}

}  // namespace

void save_kv(Ops& ops, const SeqState& s, const Runner::KvRange& r) {
    if (!s.kv || r.p1 == r.p0) return;
    STRATA_CHECK(r.p1 <= s.n_past, "state copy: positions up to {} of a sequence holding {}", r.p1, s.n_past);
    each_run(std::as_const(*s.kv), r, [&](const uint8_t* dev, uint8_t* host, size_t bytes) { ops.to_host(host, dev, bytes); });
}

void load_kv(Ops& ops, SeqState& s, const Runner::KvRange& r) {
    if (!s.kv || r.p1 == r.p0) return;
    each_run(*s.kv, r, [&](uint8_t* dev, uint8_t* host, size_t bytes) { ops.to_device(dev, host, bytes); });
}

void save_recurrent(Ops& ops, const SeqState& s, uint8_t* dst) {
    if (!s.gdn) return;
    StateSnapshot::settle(ops, *s.gdn);  // the whole state in its own buffer
    ops.to_host(dst, s.gdn->conv(0), s.gdn->bytes());
}

void load_recurrent(Ops& ops, SeqState& s, const uint8_t* src) {
    if (!s.gdn) return;
    ops.to_device(s.gdn->conv(0), src, s.gdn->bytes());  // load_state made it forget any other buffer
}

}  // namespace strata::split_detail

// --- SplitRunnerImpl: every stage copies its own layers' part, at its offset ---

namespace strata::split_detail {

namespace {

// Where stage s's runs start in a copy of cap positions, and its recurrent part.
struct StageOffsets {
    std::vector<size_t> kv, rec;
};

StageOffsets offsets(const std::vector<SeqState>& states) {
    StageOffsets o;
    size_t kv = 0, rec = 0;
    for (const SeqState& st : states) {
        o.kv.push_back(kv);
        o.rec.push_back(rec);
        kv += kv_pos_bytes(st);
        rec += recurrent_bytes(st);
    }
    return o;
}

Runner::KvRange at(const Runner::KvRange& r, size_t pos_offset) {
    Runner::KvRange out = r;
    out.host = r.host + pos_offset * static_cast<size_t>(r.cap);
    return out;
}

}  // namespace

// Every sequence has one shape: the sizes are read off any of them.
size_t SplitRunnerImpl::kv_bytes_per_pos() const {
    STRATA_CHECK(!seqs_.empty(), "kv_bytes_per_pos: the runner has no sequence yet");
    size_t n = 0;
    for (const SeqState& st : seqs_.begin()->second.states) n += kv_pos_bytes(st);
    return n;
}

size_t SplitRunnerImpl::recurrent_bytes() const {
    STRATA_CHECK(!seqs_.empty(), "recurrent_bytes: the runner has no sequence yet");
    size_t n = 0;
    for (const SeqState& st : seqs_.begin()->second.states) n += split_detail::recurrent_bytes(st);
    return n;
}

void SplitRunnerImpl::save_state(int seq, std::span<const KvRange> kv, uint8_t* recurrent) {
    Sequence& q = sequence(seq);
    for (const KvRange& r : kv)
        STRATA_CHECK(r.p1 <= q.n_past, "save_state: positions up to {} of sequence {}, which holds {}", r.p1, seq, q.n_past);
    const StageOffsets o = offsets(q.states);
    on_every_stage([&](size_t s) {
        Ops& ops = stages_[s].dev->ops();
        for (const KvRange& r : kv) save_kv(ops, q.states[s], at(r, o.kv[s]));
        if (recurrent) save_recurrent(ops, q.states[s], recurrent + o.rec[s]);
    }, /*spread=*/true);
}

void SplitRunnerImpl::load_state(int seq, std::span<const KvRange> kv, const uint8_t* recurrent, int64_t n_past) {
    Sequence& q = sequence(seq);
    STRATA_CHECK(n_past >= 0 && n_past <= n_ctx_, "load_state: {} positions in a context of {}", n_past, n_ctx_);
    STRATA_CHECK(recurrent || !model_->hp().hybrid(), "load_state: this model's recurrent state is required");
    // The ranges must cover [0, n_past): a position left out would be stale.
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const KvRange& r : kv) spans.emplace_back(r.p0, r.p1);
    std::sort(spans.begin(), spans.end());
    int64_t covered = 0;
    for (const auto& [p0, p1] : spans)
        if (p0 <= covered) covered = std::max(covered, p1);
    STRATA_CHECK(covered >= n_past, "load_state: the copies cover positions up to {}, not {}", covered, n_past);
    const StageOffsets o = offsets(q.states);
    // A snapshot of an earlier history means nothing now; a state still reading from one's
    // buffer (snapshot.h) is written whole below, so it forgets that buffer first.
    for (SeqState& st : q.states)
        if (st.gdn) st.gdn->read_here();
    for (StateSnapshot& s : q.snaps) s.invalidate();  // the memory stays (reset_sequence)
    try {
        on_every_stage([&](size_t s) {
            Ops& ops = stages_[s].dev->ops();
            for (const KvRange& r : kv) load_kv(ops, q.states[s], at(r, o.kv[s]));
            if (recurrent) load_recurrent(ops, q.states[s], recurrent + o.rec[s]);
        }, /*spread=*/true);
    } catch (...) {
        try {
            reset_sequence(seq);  // half written: nothing of it may be used
        } catch (...) {
            q = fresh_sequence();  // the devices failed the reset too: new memory, not a half-cleared state
        }
        throw;
    }
    q.n_past = n_past;
    for (SeqState& st : q.states) st.n_past = n_past;
}

}  // namespace strata::split_detail
