#include "engine/model/host_experts.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace strata {

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

size_t HostExperts::expert_bytes(const Layer& L) const {
    size_t n = 0;
    for (int m = 0; m < 3; ++m) n += aligned(dev_.weight_bytes(L.file[m][0]));
    return n;
}

HostExperts::HostExperts(Ops& host, Ops& dev, size_t cache_bytes, int adapt_every)
    : host_(host), dev_(dev), cache_bytes_(cache_bytes), adapt_every_(adapt_every) {
    if (cache_bytes_ > 0) cache_ = dev_.alloc(cache_bytes_);
}

HostExperts::Layer& HostExperts::layer(const MoeWeights& w) {
    auto it = layers_.find(w.il);
    if (it != layers_.end()) return it->second;
    STRATA_CHECK(w.host && !w.file_gate.empty(), "layer {}: its experts are not in host memory", w.il);
    Layer L;
    const std::vector<MatView>* hosts[3] = {&w.gate, &w.up, &w.down};
    const std::vector<MatView>* files[3] = {&w.file_gate, &w.file_up, &w.file_down};
    for (int m = 0; m < 3; ++m) {
        L.file[m] = *files[m];
        L.host[m] = L.host_all[m] = *hosts[m];
        for (const MatView& f : L.file[m]) L.dev[m].push_back(dev_.weight_at(f, nullptr));  // none cached yet
    }
    L.count.assign(L.file[0].size(), 0.0);
    L.slot.assign(L.file[0].size(), -1);
    if (slot_bytes_ == 0 && cache_bytes_ > 0) {
        // Every layer of a model has experts of one shape; a layer whose experts are
        // larger than the first one's (another type) is cached nowhere.
        slot_bytes_ = expert_bytes(L);
        slots_.assign(cache_bytes_ / slot_bytes_, {-1, -1});
        cache_staging_ = dev_.alloc_staging(slot_bytes_);
    }
    if (first_ < 0 || w.il < first_) first_ = w.il;
    return layers_.emplace(w.il, std::move(L)).first->second;
}

void* HostExperts::host_buffer(int i, size_t bytes) {
    if (bufs_[i].size() < bytes) {
        bufs_[i] = Buffer();
        bufs_[i] = dev_.alloc_staging(std::max(bytes, bufs_[i].size() * 2));
    }
    return bufs_[i].data();
}

void HostExperts::run(ForwardCtx& ctx, const MoeWeights& w, const int32_t* ids, int64_t k, Tensor h, Tensor routed) {
    STRATA_CHECK(h.contiguous() && routed.contiguous(), "host experts: strided rows are not supported");
    if (w.il == first_) {  // a new window reaches the stage's first host layer
        const bool due = adapt_every_ > 0 ? windows_ > 0 && windows_ % adapt_every_ == 0 : windows_ == 1;
        if (due && cache_bytes_ > 0) rerank();
        ++windows_;
    }
    Layer& L = layer(w);
    const int64_t T = h.ne1, E = h.ne0, n = T * k;
    const size_t h_bytes = sizeof(float) * static_cast<size_t>(T * E), r_bytes = sizeof(float) * static_cast<size_t>(n * E);
    // The rows cross to the host, unless the device's memory is host memory.
    const bool direct = ctx.ops.host_memory();
    const float* hh = h.f();
    const int32_t* ih = ids;
    float* rh = routed.f();
    if (!direct) {
        auto* hb = static_cast<float*>(host_buffer(0, h_bytes));
        auto* ib = static_cast<int32_t*>(host_buffer(1, sizeof(int32_t) * static_cast<size_t>(n)));
        rh = static_cast<float*>(host_buffer(2, r_bytes));
        ctx.ops.to_host(hb, h.data, h_bytes);
        ctx.ops.to_host(ib, ids, sizeof(int32_t) * static_cast<size_t>(n));
        hh = hb;
        ih = ib;
    }
    int64_t on_dev = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = ih[i];
        STRATA_CHECK(e >= 0 && static_cast<size_t>(e) < L.count.size(), "routing picked expert {} of {}", e, L.count.size());
        L.count[static_cast<size_t>(e)] += 1;
        on_dev += L.slot[static_cast<size_t>(e)] >= 0 ? 1 : 0;
    }
    host_.moe_experts(L.host[0], L.host[1], L.host[2], ih, k, Tensor::f32(hh, E, T), Tensor::f32(rh, E, n), nullptr);
    if (!direct) ctx.ops.to_device(routed.data, rh, r_bytes);
    if (L.any_cached) ctx.ops.moe_experts(L.dev[0], L.dev[1], L.dev[2], ids, k, h, routed, nullptr);
    host_rows_ += n - on_dev;
    device_rows_ += on_dev;
}

void HostExperts::rerank() {
    Ops& dev = dev_;
    // The hottest experts of every host layer, as many as the cache has slots (ties: the
    // lower layer, then the lower expert, so a ranking is reproducible). Experts that stay
    // hot keep their slot: only the newcomers are copied.
    if (slots_.empty()) return;
    std::vector<std::tuple<double, int64_t, int64_t>> hot;
    for (auto& [il, L] : layers_) {
        if (expert_bytes(L) > slot_bytes_) continue;
        for (size_t e = 0; e < L.count.size(); ++e)
            if (L.count[e] > 0) hot.emplace_back(-L.count[e], il, static_cast<int64_t>(e));
    }
    std::sort(hot.begin(), hot.end());
    if (hot.size() > slots_.size()) hot.resize(slots_.size());
    std::vector<bool> keep(slots_.size(), false);
    std::vector<std::pair<int64_t, int64_t>> incoming;
    for (const auto& [neg, il, e] : hot) {
        const int s = layers_.at(il).slot[static_cast<size_t>(e)];
        if (s >= 0) keep[static_cast<size_t>(s)] = true;
        else incoming.emplace_back(il, e);
    }
    auto set_view = [&](Layer& L, size_t e, const std::byte* at) {
        for (int m = 0; m < 3; ++m) {
            L.dev[m][e] = dev.weight_at(L.file[m][e], at);
            L.host[m][e] = L.host_all[m][e];
            if (at) L.host[m][e].data = nullptr;  // the device computes it now
            if (at) at += aligned(dev.weight_bytes(L.file[m][e]));
        }
    };
    for (size_t s = 0; s < slots_.size(); ++s) {  // evict what fell out of the ranking
        auto& [il, e] = slots_[s];
        if (il < 0 || keep[s]) continue;
        Layer& L = layers_.at(il);
        L.slot[static_cast<size_t>(e)] = -1;
        set_view(L, static_cast<size_t>(e), nullptr);
        slots_[s] = {-1, -1};
    }
    auto* base = static_cast<std::byte*>(cache_.data());
    auto* stage = static_cast<std::byte*>(cache_staging_.data());
    size_t next = 0;
    for (const auto& [il, e] : incoming) {
        while (slots_[next].first >= 0) ++next;  // as many free slots as newcomers
        Layer& L = layers_.at(il);
        std::byte* at = base + next * slot_bytes_;
        size_t off = 0;
        for (int m = 0; m < 3; ++m) {
            const MatView& f = L.file[m][static_cast<size_t>(e)];
            dev.write_weight(f, stage + off);
            off += aligned(dev.weight_bytes(f));
        }
        // In the compute queue's order: after the work that read the slot's old expert.
        dev.to_device(at, stage, off);
        L.slot[static_cast<size_t>(e)] = static_cast<int>(next);
        set_view(L, static_cast<size_t>(e), at);
        slots_[next] = {il, e};
    }
    int64_t n = 0;
    for (auto& [il, L] : layers_) {
        L.any_cached = false;
        for (size_t e = 0; e < L.count.size(); ++e) {
            L.any_cached = L.any_cached || L.slot[e] >= 0;
            n += L.slot[e] >= 0 ? 1 : 0;
            L.count[e] *= 0.5;  // recent windows weigh more at the next ranking
        }
    }
    cached_ = n;
    reranks_ += 1;
}

HostExperts::Stats HostExperts::stats() const {
    Stats s;
    s.host_rows = host_rows_.load();
    s.device_rows = device_rows_.load();
    s.reranks = reranks_.load();
    s.cached = cached_.load();
    return s;
}

}  // namespace strata
