#include "engine/backend/gpu_ops.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/backend/gpu_ops_detail.h"
#include "engine/core/error.h"
#include "engine/state/seq_state.h"

namespace strata {

namespace {

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

using namespace gpu_ops_detail;

GpuOps::GpuOps(int device, bool graphs, bool profile) : dev_(device) {
    bind();
    stream_ = gpu::stream_create();
    if (graphs) graphs_ = gpu::graphs_create(stream_, [this] { flushed(); });
    if (profile) profile_ = gpu::profile_create(stream_);  // times only kernels launched one by one
    params_ = static_cast<uint8_t*>(keep(kParamBytes));
    tab_ = gpu::upload_iq_tables();
    bad_id_ = static_cast<int32_t*>(keep(sizeof(int32_t)));
    counter_ = static_cast<unsigned*>(keep(sizeof(unsigned)));
    route_counter_ = static_cast<unsigned*>(keep(sizeof(unsigned)));
    failed_ = static_cast<unsigned*>(keep(sizeof(unsigned)));
    bad_id_host_ = static_cast<int32_t*>(gpu::host_alloc_mapped(sizeof(int32_t)));
    *bad_id_host_ = 0;
    stage_ = static_cast<uint8_t*>(gpu::host_alloc_mapped(2 * kStageHalf));
    publish_done_ = gpu::event_create();
    for (gpu::Event& e : stage_done_) {
        e = gpu::event_create();
        gpu::event_record(e, stream_);  // a wait for a never-recorded event is an error on some runtimes
    }
    gpu::memset_async(bad_id_, 0, sizeof(int32_t), stream_);
    gpu::memset_async(counter_, 0, sizeof(unsigned), stream_);
    gpu::memset_async(route_counter_, 0, sizeof(unsigned), stream_);
    gpu::memset_async(failed_, 0, sizeof(unsigned), stream_);
    sync();
}

GpuOps::~GpuOps() {
    held_ = std::monostate{};  // held work whose window never ended: not launched from a destructor
    bind();
    try {
        gpu::stream_sync(stream_);
    } catch (...) {  // a failed kernel was reported where it ran; free regardless
    }
    gpu::graphs_destroy(graphs_);  // none runs now (and item_end left nothing collected)
    gpu::profile_destroy(profile_);
    for (auto& [t, e] : copies_) gpu::event_destroy(e);
    for (gpu::Event e : stage_done_) gpu::event_destroy(e);
    gpu::event_destroy(publish_done_);
    if (copy_stream_) {
        try {
            gpu::stream_sync(copy_stream_);
        } catch (...) {
        }
        gpu::stream_destroy(copy_stream_);
    }
    for (void* p : owned_) gpu::dev_free(p);
    for (auto& [p, n] : scratch_) gpu::dev_free(p);
    gpu::host_free(bad_id_host_);
    gpu::host_free(stage_);
    gpu::stream_destroy(stream_);
}

void GpuOps::sync() {
    bind_keeping();
    wait_stream();
}

void GpuOps::item_begin() {
    if (graphs_) gpu::graphs_attach(graphs_);
    if (profile_) {
        gpu::profile_attach(profile_);
        in_item_ = true;
        item_t0_ = now_ms();
    }
}

void GpuOps::item_end() {
    if (!std::holds_alternative<std::monostate>(held_)) bind_keeping();  // held work goes with this item's
    if (profile_) {
        gpu::profile_attach(nullptr);
        in_item_ = false;
        ++host_.items;
        host_.item_ms += now_ms() - item_t0_;
    }
    if (!graphs_) return;
    struct Detach {
        ~Detach() { gpu::graphs_attach(nullptr); }
    } detach;
    gpu::graphs_flush(graphs_);
    const gpu::GraphStats st = gpu::graphs_stats(graphs_);
    if (st.refused > refused_seen_) {
        if (refused_seen_ == 0)
            spdlog::warn("{}:{}: the runtime refused to capture a window into a graph; such windows launch kernel "
                         "by kernel",
                         gpu::backend_name(), dev_);
        refused_seen_ = st.refused;
    }
}

GraphCounts GpuOps::graph_counts() const {
    const gpu::GraphStats st = gpu::graphs_stats(graphs_);
    return {st.direct, st.captured, st.replayed, st.refused};
}

void GpuOps::flushed() {
    if (!issuing_.empty()) {
        gpu::event_record(publish_done_, stream_);  // after the batch just issued
        for (auto& [h, w] : issuing_) h->mark_issued(w, publish_done_);
        issuing_.clear();
    }
    if (stage_dirty_) {
        gpu::event_record(stage_done_[stage_half_], stream_);
        stage_dirty_ = false;
    }
    if (making_room_) return;  // stage() flushed for room: the batch's params go on
    fresh_ = true;
    param_used_ = 0;
    pos_dev_ = nullptr;
}

std::string GpuOps::profile() const {
    if (!profile_) return {};
    return fmt::format("  host: {} queue items, {:.3f} ms in them ({:.3f} ms of which waiting for the device), "
                       "{:.3f} ms waiting outside them\n",
                       host_.items, host_.item_ms, host_.wait_in_items_ms, host_.wait_ms) +
           (graphs_ ? std::string("  kernels not timed: they run as graphs (STRATA_GPU_GRAPHS=0 times each)\n")
                    : gpu::profile_report(profile_, 30));
}

template <typename F>
void GpuOps::count_wait(F&& wait) {
    if (!profile_) return wait();
    const double t0 = now_ms();
    wait();
    (in_item_ ? host_.wait_in_items_ms : host_.wait_ms) += now_ms() - t0;
}

void GpuOps::wait_stream() {
    count_wait([&] { gpu::stream_sync(stream_); });
    if (profile_) gpu::profile_collect(profile_);
    if (id_rows_ < 0) return;
    const int64_t rows = id_rows_;
    const int32_t bad = *bad_id_host_;
    id_rows_ = -1;
    if (bad == 0) return;
    *bad_id_host_ = 0;
    gpu::memset_async(bad_id_, 0, sizeof(int32_t), stream_);
    fail("token id {} is out of range (vocabulary has {})", bad - 1, rows);
}

void* GpuOps::keep(size_t bytes) {
    meter_.charge(bytes, "weights");
    void* p = nullptr;
    try {
        p = gpu::dev_alloc_async(bytes, stream_);  // weights and tables can come while another stage spins
    } catch (...) {
        meter_.release(bytes);
        throw;
    }
    owned_.push_back(p);
    return p;
}

// The slots' sizes for windows up to w (each slot grows to its largest need exactly, so
// this is their peak).
int64_t GpuOps::scratch_bytes(const WindowShape& w) const {
    const int64_t experts = 2 * w.expert_rows * w.expert_ff * static_cast<int64_t>(sizeof(float));  // slots 0, 1
    const int64_t act = static_cast<int64_t>(gpu::act_q_bytes(w.max_in, std::max(w.rows, w.expert_rows)));
    // The SwiGLU's digits where gate and up launch with it (slot kSwigluSlot; counted for
    // every window with experts), and the block counters of that launch and of the GDN
    // recurrence with its norm (one buffer, as large as the larger need).
    const int64_t swiglu =
        w.expert_rows > 0 ? static_cast<int64_t>(gpu::act_q_bytes(w.expert_ff, w.expert_rows)) : 0;
    const int64_t counters = std::max({w.expert_rows * (w.expert_ff / 32), w.gdn_heads, int64_t{1}}) *
                             static_cast<int64_t>(sizeof(unsigned));
    const int64_t attn =
        w.n_head > 0 ? static_cast<int64_t>(gpu::attention_scratch_floats(w.rows, w.n_head, w.head_dim_v) * sizeof(float))
                     : 0;
    const int64_t groups = group_by_expert(w.rows, w.expert_rows, w.n_expert)
                               ? static_cast<int64_t>(gpu::expert_groups_ints(w.n_expert, w.expert_rows) * sizeof(int32_t))
                               : 0;
    // A window of up to w.rows rows includes the decode and verify windows that fuse.
    const int64_t fused = static_cast<int64_t>(gpu::act_q_bytes(w.max_in, std::min(w.rows, kFuseRows)));
    const int64_t norm = static_cast<int64_t>(gpu::act_q_bytes(w.max_in, 1));  // a decode step's (kNormSlot)
    return experts + act + swiglu + counters + attn + groups + fused + norm;
}

void GpuOps::overwrites(const void* p, size_t bytes) {
    if (!fused_) return;
    const auto* a = static_cast<const char*>(p);
    const auto* f = reinterpret_cast<const char*>(fused_->x.p);
    const size_t f_bytes = sizeof(float) * static_cast<size_t>((fused_->x.rows - 1) * fused_->x.ld + fused_->x.cols);
    if (a < f + f_bytes && f < a + bytes) fused_.reset();
}

void* GpuOps::fused_scratch(const gpu::Rows& y) {
    const size_t bytes = gpu::act_q_bytes(y.cols, y.rows);
    return scratch(kFusedSlot, (bytes + sizeof(float) - 1) / sizeof(float));
}

bool GpuOps::in_slot(const gpu::ActQ& a, size_t i) const {
    if (scratch_.size() <= i || scratch_[i].first == nullptr) return false;
    const auto* p = static_cast<const char*>(scratch_[i].first);
    const auto* q = reinterpret_cast<const char*>(a.q);
    return q >= p && q < p + scratch_[i].second * sizeof(float);
}

unsigned* GpuOps::counters(size_t n) {
    static_assert(sizeof(unsigned) == sizeof(float), "counters in a float slot");
    const size_t before = scratch_.size() > kCounterSlot ? scratch_[kCounterSlot].second : 0;
    auto* p = reinterpret_cast<unsigned*>(scratch(kCounterSlot, n));
    // A new buffer, in stream order: zeroed before any kernel queued after it counts.
    if (scratch_[kCounterSlot].second != before) gpu::memset_async(p, 0, n * sizeof(unsigned), stream_);
    return p;
}

float* GpuOps::scratch(size_t i, size_t floats) {
    if (scratch_.size() <= i) scratch_.resize(i + 1, {nullptr, 0});
    auto& [p, n] = scratch_[i];
    if (n < floats) {
        // Both in stream order: queued kernels still read the old buffer, and another
        // stage on this device may be spinning in a hand-off wait for this window
        // (a device-wide free would wait for it forever).
        const size_t grown = floats;  // exactly: scratch_bytes is then the peak
        if (p) gpu::dev_free_async(p, stream_);
        meter_.release(n * sizeof(float));
        p = nullptr;
        n = 0;
        meter_.charge(grown * sizeof(float), "op scratch");
        try {
            p = gpu::dev_alloc_async(grown * sizeof(float), stream_);
        } catch (...) {
            meter_.release(grown * sizeof(float));
            throw;
        }
        n = grown;
    }
    return static_cast<float*>(p);
}

Buffer GpuOps::alloc(size_t bytes) {
    bind_keeping();
    return meter_.metered(bytes, "alloc", [&] {
        void* p = gpu::dev_alloc(bytes);
        gpu::memset_async(p, 0, bytes, stream_);
        const int dev = dev_;
        return Buffer(p, bytes, [dev](void* q) {
            gpu::set_device(dev);
            gpu::dev_free(q);  // frees after the device's queued work, as the runtime orders it
        });
    });
}

Buffer GpuOps::alloc_staging(size_t bytes) {
    bind_keeping();
    return Buffer(gpu::host_alloc_mapped(bytes), bytes, [](void* p) { gpu::host_free(p); });
}

size_t GpuOps::weight_bytes(const MatView& w) {
    STRATA_CHECK(gpu::supports(w.type), "weight type {} has no GPU kernel", type_info(w.type).name);
    return (row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out) + 255) / 256 * 256;
}

void GpuOps::write_weight(const MatView& w, void* host) { copy_rows(w, host); }

MatView GpuOps::weight_at(const MatView& w, const void* at) {
    return MatView{w.type, at, w.n_in, w.n_out, row_bytes(w.type, w.n_in), nullptr};
}

uint64_t GpuOps::copy_in_async(void* dst, const void* src, size_t bytes) {
    bind_keeping();
    overwrites(dst, bytes);
    if (!copy_stream_) copy_stream_ = gpu::stream_create();
    // After what the compute stream has queued (the layer that last used dst), and
    // before whatever it queues next: the copy stream waits for an event of it.
    gpu::Event before = gpu::event_create();
    gpu::event_record(before, stream_);
    gpu::stream_wait(copy_stream_, before);
    gpu::copy_async(dst, src, bytes, copy_stream_);
    gpu::Event done = gpu::event_create();
    gpu::event_record(done, copy_stream_);
    gpu::event_destroy(before);  // released once it completes, as the runtime defines it
    copies_[++next_ticket_] = done;
    return next_ticket_;
}

void GpuOps::await_copy(uint64_t ticket) {
    bind_keeping();
    auto it = copies_.find(ticket);
    STRATA_CHECK(it != copies_.end(), "await_copy: no copy {} in flight", ticket);
    gpu::stream_wait(stream_, it->second);
    gpu::event_destroy(it->second);
    copies_.erase(it);
}

uint8_t* GpuOps::stage(size_t bytes) {
    if (fresh_ || stage_used_ + bytes > kStageHalf) {
        // Collected copies from the current half go first (their event follows them).
        if (!fresh_) {
            making_room_ = true;
            struct Reset {
                bool& b;
                ~Reset() { b = false; }
            } reset{making_room_};
            gpu::graphs_flush(graphs_);
        }
        fresh_ = false;
        stage_half_ ^= 1;
        count_wait([&] { gpu::event_sync(stage_done_[stage_half_]); });  // its last copy has left it
        stage_used_ = 0;
    }
    uint8_t* p = stage_ + static_cast<size_t>(stage_half_) * kStageHalf + stage_used_;
    stage_used_ += (bytes + 63) / 64 * 64;
    return p;
}

// src may change once this returns: its bytes are copied to pinned memory first, and the
// copy from there is queued on the stream (after what the stream has queued, before
// what comes next) without the host waiting for it.
void GpuOps::to_device(void* dst, const void* src, size_t bytes) {
    bind_keeping();
    overwrites(dst, bytes);
    auto* out = static_cast<uint8_t*>(dst);
    const auto* in = static_cast<const uint8_t*>(src);
    while (bytes > 0) {
        const size_t n = std::min(bytes, kStageHalf);
        uint8_t* h = stage(n);
        std::memcpy(h, in, n);
        gpu::copy_async(out, h, n, stream_);
        if (gpu::graphs_recording(graphs_)) stage_dirty_ = true;  // its event once the batch is issued
        else gpu::event_record(stage_done_[stage_half_], stream_);
        out += n;
        in += n;
        bytes -= n;
    }
}

const void* GpuOps::param(const void* data, size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    STRATA_CHECK(bytes <= kParamBytes, "param: {} bytes", bytes);
    // Reusing the area is safe on the device (the copy is queued after what read it); a
    // new batch starts at 0 so that a window's kernels see the same addresses each time.
    if (param_used_ + bytes > kParamBytes) param_used_ = 0, pos_dev_ = nullptr;
    void* d = params_ + param_used_;
    param_used_ += bytes;
    to_device(d, data, bytes);
    return d;
}

// Issued now, after what was collected: host memory that may be pageable, which a graph
// cannot copy to or from.
void GpuOps::copy_now(void* dst, const void* src, size_t bytes) {
    // A copy with pageable memory returns once the stream has run everything before it:
    // the profile counts it as waiting for the device.
    const auto copy = [&] { count_wait([&] { gpu::copy_async(dst, src, bytes, stream_); }); };
    if (!gpu::graphs_recording(graphs_)) {
        copy();
        return;
    }
    gpu::graphs_flush(graphs_);
    gpu::graphs_attach(nullptr);
    struct Reattach {
        gpu::Graphs* g;
        ~Reattach() { gpu::graphs_attach(g); }
    } reattach{graphs_};
    copy();
}

void GpuOps::to_host(void* dst, const void* src, size_t bytes) {
    bind_keeping();
    copy_now(dst, src, bytes);
    wait_stream();
}

MatView GpuOps::prepare_weight(const MatView& w) {
    bind_keeping();
    STRATA_CHECK(gpu::supports(w.type), "weight type {} has no GPU kernel", type_info(w.type).name);
    const void*& copy = copy_of_[{w.data, static_cast<int>(w.type), w.n_in, w.n_out}];
    const size_t rb = row_bytes(w.type, w.n_in);
    if (!copy) {
        auto* dst = static_cast<uint8_t*>(keep(rb * static_cast<size_t>(w.n_out)));
        // The file's pages are pageable memory: copied now, never into a graph.
        if (w.row_stride == rb) copy_now(dst, w.data, rb * static_cast<size_t>(w.n_out));
        else
            for (int64_t r = 0; r < w.n_out; ++r) copy_now(dst + rb * static_cast<size_t>(r), w.row(r), rb);
        wait_stream();
        copy = dst;
    }
    MatView out = w;
    out.data = copy;
    out.row_stride = rb;
    out.packed = nullptr;
    return out;
}

const float* GpuOps::prepare_vector(std::span<const float> v) {
    bind_keeping();
    auto* dst = static_cast<float*>(keep(v.size_bytes()));
    to_device(dst, v.data(), v.size_bytes());
    return dst;
}

void GpuOps::get_rows(const MatView& table, const int32_t* ids, Tensor x) {
    bind();
    gpu::get_rows(weight(table), ids, rows(x), bad_id_, tab_, stream_);
    // The id check reaches the host at the stream's next wait (the window's to_host at the
    // latest), not here: a wait per window would stop the host from queueing the window
    // while the device runs. The model checks its ids on the host before they go in.
    gpu::copy_async(bad_id_host_, bad_id_, sizeof(int32_t), stream_);
    if (id_rows_ < 0) id_rows_ = table.n_out;
}

void GpuOps::rms_norm(Tensor x, const float* w, float eps, Tensor y) {
    const gpu::Rows xr = rows(x), yr = rows(y);
    if (const PendingAdd* held_add = held<PendingAdd>(); held_add && fuses(yr) && same_rows(held_add->y, xr)) {
        const PendingAdd a = *held_add;
        if (a.product && !in_slot(a.product->x, kNormSlot)) {
            held_ = std::monostate{};  // the product, the add and this norm: one kernel
            bind();
            const PendingProduct& p = *a.product;
            const size_t bytes = gpu::act_q_bytes(yr.cols, yr.rows);
            fused_ = Fused{yr, gpu::matmul_add_rms_norm_q(p.w, p.x, p.y, xr, w, eps, yr,
                                                          scratch(kNormSlot, (bytes + sizeof(float) - 1) / sizeof(float)),
                                                          counters(static_cast<size_t>(yr.rows)), tab_, stream_)};
            return;
        }
        if (!a.combine && !a.product) {
            held_ = std::monostate{};  // issued here, in the norm's kernel
            bind();
            fused_ = Fused{yr, gpu::add_rms_norm_q(xr, a.x, w, eps, yr, fused_scratch(yr), stream_)};
            return;
        }
        if (a.combine && a.combine->down && clear_of(a.combine->c, a.combine->out, yr, true)) {
            held_ = std::monostate{};  // the down product, the combine, the add and this norm: one kernel
            bind();
            const PendingDown& d = *a.combine->down;
            fused_ = Fused{yr, gpu::matmul_ids_combine_add_rms_norm_q(
                                   d.type, d.table, d.n_in, d.n_out, d.stride, d.ids, d.x, d.out, d.ex, a.combine->c,
                                   a.combine->out, xr, w, eps, yr, fused_scratch(yr),
                                   counters(static_cast<size_t>(yr.rows)), tab_, stream_)};
            return;
        }
        if (a.combine && !a.combine->down && clear_of(a.combine->c, a.combine->out, yr, true)) {
            held_ = std::monostate{};  // the combine, the add and this norm: one kernel
            bind();
            fused_ = Fused{yr, gpu::moe_combine_add_rms_norm_q(a.combine->c, a.combine->out, xr, w, eps, yr,
                                                               fused_scratch(yr), stream_)};
            return;
        }
    }
    bind();
    if (fuses(yr)) fused_ = Fused{yr, gpu::rms_norm_q(xr, w, eps, yr, fused_scratch(yr), stream_)};
    else gpu::rms_norm(xr, w, eps, yr, stream_);
}

void GpuOps::rms_norm_gated(Tensor x, Tensor z, const float* w, int64_t head, float eps) {
    const gpu::Rows xr = rows(x), zr = rows(z);
    const PendingRecurrent* rec = held<PendingRecurrent>();
    if (rec && same_rows(rec->o, xr) && head == rec->d.dv && zr.rows == xr.rows && !overlaps(xr, zr) &&
        !overlaps(zr, rec->state, sizeof(float) * static_cast<size_t>(rec->d.nv * rec->d.dv * rec->d.dk))) {
        const PendingRecurrent r = *rec;
        held_ = std::monostate{};  // the recurrence and this norm: one kernel
        bind();
        const gpu::GdnNormArgs norm{zr, w, eps, 0, {}, counters(static_cast<size_t>(r.d.nv))};
        fused_ = Fused{xr, gpu::gdn_recurrent(r.d.nk, r.d.nv, r.d.dk, r.d.dv, r.d.tiled, r.u, r.g, r.beta, r.state, r.o,
                                              stream_, r.gates, norm, fused_scratch(xr))};
        return;
    }
    bind();
    if (fuses(xr) && head % 32 == 0)
        fused_ = Fused{xr, gpu::rms_norm_gated_q(xr, rows(z), w, head, eps, fused_scratch(xr), stream_)};
    else gpu::rms_norm_gated(xr, rows(z), w, head, eps, stream_);
}

void GpuOps::l2_norm(Tensor x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale) {
    bind();
    gpu::l2_norm(rows(x), col0, n_heads, head, eps, scale, stream_);
}

void GpuOps::add(Tensor y, Tensor x) {
    const gpu::Rows yr = rows(y), xr = rows(x);
    const bool fits = fuses(yr) && xr.cols == yr.cols && xr.rows == yr.rows;
    std::optional<PendingCombine> comb;
    std::optional<PendingProduct> prod;
    if (const PendingCombine* c = held<PendingCombine>();
        c && fits && same_rows(c->out, xr) && clear_of(c->c, c->out, yr, false)) {
        comb = take<PendingCombine>();  // the combine of x stays held with this add
    } else if (const PendingProduct* p = held<PendingProduct>(); p && fits && same_rows(p->y, xr) && !overlaps(yr, xr)) {
        prod = take<PendingProduct>();  // likewise the product of x
    }
    bind();  // issues other held work
    if (fits) held_ = PendingAdd{yr, xr, comb, prod};
    else gpu::add(yr, xr, stream_);
}

void GpuOps::flush_held() {
    Held h = std::monostate{};
    std::swap(h, held_);
    std::visit([this](const auto& p) { issue(p); }, h);
}

void GpuOps::issue(const PendingAdd& a) {
    if (a.combine) issue(*a.combine);
    if (a.product) issue(*a.product);
    gpu::add(a.y, a.x, stream_);
}

void GpuOps::issue(const PendingProduct& p) {
    gpu::matmul_q(p.w, p.x, p.y, tab_, stream_);
}

void GpuOps::issue(const PendingCombine& c) {
    if (c.down) issue(*c.down);
    gpu::moe_combine(c.c, c.out, stream_);
}

void GpuOps::swiglu(Tensor g, Tensor u, Tensor y) {
    bind();
    const gpu::Rows yr = rows(y);
    if (fuses(yr)) fused_ = Fused{yr, gpu::swiglu_q(rows(g), rows(u), yr, fused_scratch(yr), stream_)};
    else gpu::swiglu(rows(g), rows(u), yr, stream_);
}

void GpuOps::copy(Tensor dst, Tensor src) {
    STRATA_CHECK(dst.ne0 == src.ne0 && dst.ne1 == src.ne1, "copy: shapes differ");
    bind();
    gpu::copy(rows(dst), rows(src), stream_);
}

void GpuOps::zero(Tensor dst) {
    STRATA_CHECK(dst.type == GgmlType::F32, "GPU ops take f32 rows");
    bind();
    const size_t row = sizeof(float) * static_cast<size_t>(dst.ne0);
    if (dst.contiguous()) {
        gpu::memset_async(dst.data, 0, row * static_cast<size_t>(dst.ne1), stream_);
        return;
    }
    for (int64_t r = 0; r < dst.ne1; ++r) gpu::memset_async(dst.row(r), 0, row, stream_);
}

gpu::ActQ GpuOps::quantized(gpu::Rows x, size_t slot) {
    if (fused_) {
        // x is fused_'s rows r0 .. r0 + x.rows - 1 (a window's last row, say): their digits.
        const gpu::Rows& f = fused_->x;
        const std::ptrdiff_t off = x.p - f.p;
        if (x.cols == f.cols && off >= 0 && off % f.ld == 0 && (x.rows == 1 || x.ld == f.ld) &&
            off / f.ld + x.rows <= f.rows) {
            return fused_->q.rows_at(off / f.ld, x.rows);
        }
    }
    const size_t bytes = gpu::act_q_bytes(x.cols, x.rows);
    return gpu::quantize_act(x, scratch(slot, (bytes + sizeof(float) - 1) / sizeof(float)), stream_);
}

// Quantized weights take the integer dot products (matmul_q.cu) at every row count, so
// that a row's result never depends on the window it came in; float weights the float
// kernel.
void GpuOps::matmul(const MatView& w, Tensor x, Tensor y) {
    bind_keeping();
    overwrites(rows(y));
    const gpu::Rows xr = rows(x), yr = rows(y);
    if (gpu::int_dot(w.type)) {
        const gpu::ActQ xq = quantized(xr, kActSlot);
        // A decode step's or a verify window's out projection or down product, perhaps:
        // see add and rms_norm.
        if (xr.rows <= gpu::kNormProductRows && fuses(yr) && !overlaps(xr, yr)) held_ = PendingProduct{weight(w), xq, yr};
        else gpu::matmul_q(weight(w), xq, yr, tab_, stream_);
    } else if (gpu::float_weight(w.type) && xr.rows <= kFuseRows && w.n_out <= gpu::kTopkMaxExperts &&
               !overlaps(xr, yr)) {
        held_ = PendingRouter{weight(w), xr, yr};  // a MoE router's, perhaps: see topk_softmax
    } else {
        gpu::matmul(weight(w), xr, yr, tab_, stream_);
    }
}

void GpuOps::issue(const PendingRouter& r) {
    gpu::matmul(r.w, r.x, r.y, tab_, stream_);
}

// The integer products in launches of up to gpu::kMultiMax weights that fit together
// (q, k and v of one type: one launch), x quantized once for all of them.
void GpuOps::matmul_multi(std::span<const MatOut> outs, Tensor x) {
    bind_keeping();
    gpu::ActQ xq{};
    bool have_xq = false;
    std::array<gpu::Weight, gpu::kMultiMax> ws;
    std::array<gpu::Rows, gpu::kMultiMax> ys;
    size_t n = 0;
    const auto issue = [&] {
        if (n > 0) gpu::matmul_q_multi({ws.data(), n}, {ys.data(), n}, xq, tab_, stream_);
        n = 0;
    };
    for (const MatOut& o : outs) {
        const gpu::Rows y{o.y, o.w.n_out, x.ne1, o.ldy};
        overwrites(y);
        if (!gpu::int_dot(o.w.type)) {
            gpu::matmul(weight(o.w), rows(x), y, tab_, stream_);
            continue;
        }
        if (!have_xq) xq = quantized(rows(x), kActSlot), have_xq = true;
        const gpu::Weight w = weight(o.w);
        if (n == ws.size() || (n > 0 && !gpu::multi_fits(ws[0], w))) issue();
        ws[n] = w, ys[n] = y, ++n;
    }
    issue();
}

void GpuOps::handoff_publish(Tensor x, Handoff& h, uint64_t window, bool drop) {
    STRATA_CHECK(static_cast<size_t>(x.ne0 * x.ne1) <= h.capacity(), "hand-off: {} values, the payload holds {}",
                 x.ne0 * x.ne1, h.capacity());
    bind();
    const auto* w = static_cast<const uint64_t*>(param(&window, sizeof window));
    gpu::handoff_publish(rows(x), h.payload(), h.ready_word(), w, drop, counter_, hand_in_ ? failed_ : nullptr, stream_);
    hand_in_ = false;
    if (!h.shared_device()) return;
    // One event serves every such publish: a reader that waits on it after a later record
    // waits for that later point of this stream, which comes after its own publish.
    if (gpu::graphs_recording(graphs_)) {
        issuing_.emplace_back(&h, window);  // handed over once the batch is issued
    } else {
        gpu::event_record(publish_done_, stream_);
        h.mark_issued(window, publish_done_);
    }
}

std::optional<Tensor> GpuOps::handoff_wait(Handoff& h, uint64_t window, int64_t timeout_ms, Tensor x) {
    STRATA_CHECK(static_cast<size_t>(x.ne0 * x.ne1) <= h.capacity(), "hand-off: {} values, the payload holds {}",
                 x.ne0 * x.ne1, h.capacity());
    bind();
    // On the device: the host queues the stage's kernels behind the wait without waiting
    // itself; the time limit is measured with the GPU's clock. With the writer on this
    // same card, the wait goes to the device only after the writer's window did
    // (Handoff::shared_device); if that never comes, the kernel's own limit fails it.
    if (h.shared_device())
        if (void* ev = h.await_issued(window, timeout_ms)) gpu::stream_wait(stream_, static_cast<gpu::Event>(ev));
    const auto* w = static_cast<const uint64_t*>(param(&window, sizeof window));
    gpu::handoff_wait(h.ready_word(), h.error_word(), w, timeout_ms, h.payload(), rows(x), failed_, stream_);
    hand_in_ = true;  // this step's publish (if any) reads the outcome
    return x;
}

bool GpuOps::hand_in_failed(const Handoff& h) {
    sync();
    // The step is over: a later publish on this op set (another stage's on the same
    // device, the next window's) is not this wait's to stop.
    hand_in_ = false;
    const bool failed = h.error() != Handoff::kNoError;
    if (failed) gpu::memset_async(failed_, 0, sizeof(unsigned), stream_);
    return failed;
}

}  // namespace strata
