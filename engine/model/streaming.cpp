#include "engine/model/streaming.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/core/error.h"

namespace strata {

LayerStream::LayerStream(Ops& ops, std::vector<Buffer> slots, std::vector<Layer> layers)
    : ops_(ops),
      slots_(std::move(slots)), layers_(std::move(layers)), state_(slots_.size()) {
    STRATA_CHECK(!slots_.empty() && !layers_.empty(), "a layer stream needs slots and layers");
    for (const Layer& l : layers_)
        for (const Buffer& s : slots_)
            STRATA_CHECK(l.bytes <= s.size(), "layer {} ({} bytes) does not fit a slot of {}", l.il, l.bytes, s.size());
}

LayerStream::~LayerStream() {
    for (int k = 0; k < n_slots(); ++k) {
        try {
            settle(ops_, k);
        } catch (...) {  // a failed copy was the window's to report; the memory goes regardless
        }
    }
}

int64_t LayerStream::index(int64_t il) const {
    const int64_t j = il - layers_.front().il;
    return j >= 0 && j < static_cast<int64_t>(layers_.size()) ? j : -1;
}

void LayerStream::settle(Ops& ops, int s) {
    Slot& st = state_[static_cast<size_t>(s)];
    if (st.ticket == 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    ops.await_copy(st.ticket);
    wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    st.ticket = 0;
}

void LayerStream::copy_into(Ops& ops, int s, int64_t j, bool prefetch) {
    settle(ops, s);  // a copy still landing there (a stale prefetch) goes first
    Slot& st = state_[static_cast<size_t>(s)];
    const Layer& l = layers_[static_cast<size_t>(j)];
    st.layer = -1;  // if the copy cannot start, the slot holds nothing known
    if (prefetch && ++prefetches_ == fail_prefetch_at_) fail("injected prefetch failure (LayerStream::fail_prefetch)");
    st.ticket = ops.copy_in_async(slot(s), l.host.data(), l.bytes);
    st.layer = j;
    copies_ += 1;
    bytes_ += static_cast<int64_t>(l.bytes);
}

void LayerStream::enter(Ops& ops, int64_t il) {
    const int64_t j = index(il);
    if (j < 0) return;
    int s = -1;
    for (int k = 0; k < n_slots(); ++k)
        if (state_[static_cast<size_t>(k)].layer == j) s = k;
    if (s < 0) {
        // Not there: into the slot the last layer did not use (it may still be read by
        // work queued before; the copy is ordered after it).
        s = n_slots() == 1 ? 0 : (active_ + 1) % n_slots();
        copy_into(ops, s, j);
        sync_ += 1;
    } else if (state_[static_cast<size_t>(s)].ticket != 0) {
        hits_ += 1;
    } else {
        reused_ += 1;
    }
    settle(ops, s);
    active_ = s;
    if (n_slots() < 2) return;
    const int64_t next = (j + 1) % static_cast<int64_t>(layers_.size());
    for (int k = 0; k < n_slots(); ++k)
        if (state_[static_cast<size_t>(k)].layer == next) return;  // there, or on its way
    const int t = (s + 1) % n_slots();
    if (!prefetch_) return;
    try {
        copy_into(ops, t, next, /*prefetch=*/true);
    } catch (const std::exception& e) {
        // A prefetch that cannot start (its copy queue failed): every layer is copied at
        // its turn from now on, which needs nothing the plan did not already hold.
        prefetch_ = false;
        spdlog::warn("layer streaming: prefetch off, layers are copied at their turn ({})", e.what());
    }
}

const LayerWeights& LayerStream::layer(int64_t il) const {
    const int64_t j = index(il);
    STRATA_CHECK(j >= 0 && active_ >= 0 && state_[static_cast<size_t>(active_)].layer == j,
                 "layer {} runs without its weights in a slot (LayerStream::enter first)", il);
    return *layers_[static_cast<size_t>(j)].at_slot[static_cast<size_t>(active_)];
}

void LayerStream::release(Ops& ops) {
    for (int k = 0; k < n_slots(); ++k) {
        settle(ops, k);
        state_[static_cast<size_t>(k)] = Slot{};
    }
    active_ = -1;
}

LayerStream::Stats LayerStream::stats() const {
    Stats s;
    s.copies = copies_.load();
    s.bytes = bytes_.load();
    s.prefetch_hits = hits_.load();
    s.sync_loads = sync_.load();
    s.reused = reused_.load();
    s.wait_ms = static_cast<double>(wait_ns_.load()) / 1e6;
    return s;
}

}  // namespace strata
