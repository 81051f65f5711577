#include "engine/backend/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "engine/quant/quant.h"
#include "engine/state/seq_state.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gdn_rule.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace strata {

namespace {
ops::GdnHeads heads(const GdnDims& d) { return {d.nk, d.nv, d.dk, d.dv, d.tiled}; }

// A product's weight for the profile: "n_out x n_in type"; several outputs of one input
// (matmul_multi) as their outputs summed, with their count.
std::string shape(const MatView& w) { return fmt::format("{}x{} {}", w.n_out, w.n_in, type_info(w.type).name); }
std::string shape(std::span<const MatOut> outs) {
    int64_t n = 0;
    for (const MatOut& o : outs) n += o.w.n_out;
    const MatView& w = outs.front().w;
    return outs.size() == 1 ? shape(w) : fmt::format("{}:{}x{} {}", outs.size(), n, w.n_in, type_info(w.type).name);
}
}  // namespace

void CpuOps::set_profile(bool on) { profile_ = on ? std::make_unique<OpProfile>() : nullptr; }

std::string CpuOps::profile() const { return profile_ ? profile_->report() : std::string(); }

namespace {
// Whether every value of an F32 matrix is a BF16 value (its low 16 bits zero), as the
// F32 matrices of a GGUF converted from a BF16 checkpoint are: the MoE router
// (ffn_gate_inp, which the converters keep in F32), or every matrix of an F32 file.
bool bf16_exact(const MatView& w) {
    for (int64_t r = 0; r < w.n_out; ++r) {
        const uint8_t* row = w.row(r);
        uint32_t low = 0;
        for (int64_t i = 0; i < w.n_in; ++i) {
            uint32_t u;
            std::memcpy(&u, row + 4 * i, 4);
            low |= u & 0xFFFFu;
        }
        if (low != 0) return false;
    }
    return true;
}
}  // namespace

MatView CpuOps::prepare_weight(const MatView& w) {
    // An F32 matrix of BF16 values is kept as BF16: half the bytes for each product to
    // read (Qwen3-Next's routers are 4 MiB a layer in F32, ~200 MiB a token over 48
    // layers), widened exactly in the kernel, so the same products bit for bit.
    if (w.type == GgmlType::F32 && w.data) {
        const auto key = std::make_tuple(w.data, static_cast<int>(GgmlType::BF16), w.n_in, w.n_out);
        auto it = packed_of_.find(key);
        if (it == packed_of_.end()) {
            const void* copy = nullptr;
            if (bf16_exact(w)) {  // the BF16 quantizer's rounding keeps exact values as they are
                const size_t rb = row_bytes(GgmlType::BF16, w.n_in);
                auto* dst = static_cast<uint8_t*>(store_.alloc(rb * static_cast<size_t>(w.n_out)));
                for (int64_t r = 0; r < w.n_out; ++r)
                    quantize_row(GgmlType::BF16, reinterpret_cast<const float*>(w.row(r)), dst + rb * static_cast<size_t>(r),
                                 w.n_in);
                copy = dst;
            }
            it = packed_of_.emplace(key, copy).first;  // null: not BF16 values, read as F32
        }
        if (it->second)
            return MatView{GgmlType::BF16, it->second, w.n_in, w.n_out, row_bytes(GgmlType::BF16, w.n_in), nullptr};
        return w;
    }
    const size_t n = packed_size(w);
    if (n == 0 || w.packed) return w;
    MatView out = w;
    const void*& copy = packed_of_[{w.data, static_cast<int>(w.type), w.n_in, w.n_out}];
    if (!copy) {
        void* dst = store_.alloc(n);
        pack_weights(w, dst);
        copy = dst;
    }
    out.packed = copy;
    return out;
}

MatView CpuOps::prepare_table(const MatView& t) {
    // The rows copied out of the file, as they are (get_rows dequantizes one row at a
    // time). Read in place, a decode step's token row was a page of the file mapping:
    // each first touch of a page a fault (a 32000 x 512 q8_0 table: 20-50 us apiece on a
    // VM, 30 us a step on average, 3% of a small model's decode step), and every row a
    // walk of 4 KiB pages. The copy lies in the store's huge pages, as the packed weights.
    if (!t.data) return t;
    const void*& copy = table_of_[{t.data, static_cast<int>(t.type), t.n_in, t.n_out}];
    if (!copy) {
        void* dst = store_.alloc(row_bytes(t.type, t.n_in) * static_cast<size_t>(t.n_out));
        copy_rows(t, dst);
        copy = dst;
    }
    return MatView{t.type, copy, t.n_in, t.n_out, row_bytes(t.type, t.n_in), nullptr};
}

size_t CpuOps::weight_bytes(const MatView& w) {
    const size_t n = packed_size(w);
    return ((n > 0 ? n : row_bytes(w.type, w.n_in) * static_cast<size_t>(w.n_out)) + 63) / 64 * 64;
}

void CpuOps::write_weight(const MatView& w, void* host) {
    if (packed_size(w) > 0) {
        pack_weights(w, host);
        return;
    }
    copy_rows(w, host);
}

MatView CpuOps::weight_at(const MatView& w, const void* at) {
    // The packed form replaces the rows for every kernel that reads the weight; `data`
    // points at it too, so no view placed by its stage leads back into the file.
    MatView out{w.type, at, w.n_in, w.n_out, row_bytes(w.type, w.n_in), nullptr};
    if (packed_size(w) > 0) out.packed = at;
    return out;
}

uint64_t CpuOps::copy_in_async(void* dst, const void* src, size_t bytes) {
    // Ops run as they are called here, so the work before this copy is done already.
    if (!copier_) copier_ = std::make_unique<WorkQueue>(nullptr, nullptr);
    copier_->submit([dst, src, bytes] { std::memcpy(dst, src, bytes); });
    copies_[++next_ticket_] = copier_->record();
    return next_ticket_;
}

void CpuOps::await_copy(uint64_t ticket) {
    auto it = copies_.find(ticket);
    STRATA_CHECK(it != copies_.end(), "await_copy: no copy {} in flight", ticket);
    const DeviceEvent ev = it->second;
    copies_.erase(it);
    ev.wait(0);
    ev.rethrow();
}

void CpuOps::row_seqs(const Batch& batch) {
    row_seq_.resize(static_cast<size_t>(batch.n_rows));
    for (size_t i = 0; i < batch.seqs.size(); ++i)
        for (int64_t r = 0; r < batch.seqs[i].n; ++r)
            row_seq_[static_cast<size_t>(batch.seqs[i].row0 + r)] = static_cast<int32_t>(i);
}

void CpuOps::get_rows(const MatView& table, const int32_t* ids, Tensor x) {
    const OpTimer tm = timed("get_rows", x.ne1);
    for (int64_t t = 0; t < x.ne1; ++t) {
        const int32_t id = ids[t];
        if (id < 0 || id >= table.n_out) fail("token id {} is out of range (vocabulary has {})", id, table.n_out);
        dequantize_row(table.type, table.row(id), x.row(t), table.n_in);
    }
}

void CpuOps::rms_norm(Tensor x, const float* w, float eps, Tensor y) {
    const OpTimer tm = timed("rms_norm", x.ne1);
    for (int64_t r = 0; r < x.ne1; ++r) ops::rmsnorm(x.row(r), w, eps, x.ne0, y.row(r));
}

void CpuOps::rms_norm_gated(Tensor x, Tensor z, const float* w, int64_t head, float eps) {
    const OpTimer tm = timed("rms_norm_gated", x.ne1);
    const int64_t n_heads = x.ne0 / head;
    for (int64_t t = 0; t < x.ne1; ++t)
        for (int64_t hh = 0; hh < n_heads; ++hh) {
            float* oh = x.row(t) + hh * head;
            const float* zh = z.row(t) + hh * head;
            ops::rmsnorm(oh, w, eps, head, oh);
            ops::swiglu(zh, oh, head, oh);  // oh * silu(zh), sixteen at a time
        }
}

void CpuOps::l2_norm(Tensor x, int64_t col0, int64_t n_heads, int64_t head, float eps, float scale) {
    const OpTimer tm = timed("l2_norm", x.ne1);
    for (int64_t t = 0; t < x.ne1; ++t)
        for (int64_t g = 0; g < n_heads; ++g) {
            float* v = x.row(t) + col0 + g * head;
            const float inv = 1.0f / std::max(std::sqrt(ops::dot(v, v, head)), eps);
            for (int64_t i = 0; i < head; ++i) v[i] = v[i] * inv * scale;
        }
}

const float* CpuOps::prepare_vector(std::span<const float> v) {
    auto* dst = static_cast<float*>(vectors_.alloc(v.size_bytes()));
    std::memcpy(dst, v.data(), v.size_bytes());
    return dst;
}

void CpuOps::add(Tensor y, Tensor x) {
    const OpTimer tm = timed("add", y.ne1);
    if (y.contiguous() && x.contiguous()) {
        ops::add(y.f(), x.f(), y.ne0 * y.ne1);
        return;
    }
    for (int64_t r = 0; r < y.ne1; ++r) ops::add(y.row(r), x.row(r), y.ne0);
}

void CpuOps::swiglu(Tensor g, Tensor u, Tensor y) {
    const OpTimer tm = timed("swiglu", g.ne1);
    STRATA_CHECK(g.contiguous() && u.contiguous() && y.contiguous(), "swiglu: strided views are not supported");
    // Elementwise, so the split across threads changes nothing in the result: one equal
    // part per thread (a decode step has a few thousand values).
    const int64_t n = g.ne0 * g.ne1, parts = pool_.size();
    pool_.run(parts, [&](int64_t k) {
        const int64_t i0 = n * k / parts, i1 = n * (k + 1) / parts;
        ops::swiglu(g.f() + i0, u.f() + i0, i1 - i0, y.f() + i0);
    });
}

void CpuOps::copy(Tensor dst, Tensor src) {
    const OpTimer tm = timed("copy", src.ne1);
    STRATA_CHECK(dst.ne0 == src.ne0 && dst.ne1 == src.ne1, "copy: shapes differ");
    const size_t row = sizeof(float) * static_cast<size_t>(src.ne0);
    // A large copy (a snapshot of a recurrent state: megabytes) on every thread; a
    // window's few rows on this one.
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 10) / std::max<size_t>(row, 1)));
    if (src.ne1 <= grain) {
        for (int64_t r = 0; r < src.ne1; ++r) std::memcpy(dst.row(r), src.row(r), row);
        return;
    }
    pool_.parallel_for(src.ne1, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::memcpy(dst.row(r), src.row(r), row);
    });
}

void CpuOps::zero(Tensor dst) {
    const OpTimer tm = timed("zero", dst.ne1);
    const size_t row = sizeof(float) * static_cast<size_t>(dst.ne0);
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 10) / std::max<size_t>(row, 1)));
    pool_.parallel_for(dst.ne1, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::memset(dst.row(r), 0, row);
    });
}

void CpuOps::matmul(const MatView& w, Tensor x, Tensor y) {
    const OpTimer tm = timed("matmul", x.ne1, profile_ ? shape(w) : std::string());
    strata::matmul(pool_, w, x.f(), x.ld(), x.ne1, y.f(), y.ld());
}

void CpuOps::matmul_multi(std::span<const MatOut> outs, Tensor x) {
    const OpTimer tm = timed("matmul_multi", x.ne1, profile_ ? shape(outs) : std::string());
    strata::matmul_multi(pool_, outs, x.f(), x.ld(), x.ne1);
}

void CpuOps::norm_rope(const Batch& batch, std::span<const RopeHeads> sets, int64_t head_dim, float eps,
                       const RopeParams& rope) {
    const OpTimer tm = timed("norm_rope", batch.n_rows);
    row_seqs(batch);
    cs_.resize(static_cast<size_t>(rope.n_rot));
    for (int64_t t = 0; t < batch.n_rows; ++t) {
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq_[static_cast<size_t>(t)])];
        ops::rope_angles(rope.n_rot, bs.pos0 + (t - bs.row0), rope.freq_base, rope.freq_scale, rope.freq_factors,
                          cs_.data(), {rope.ext_factor, rope.corr_low, rope.corr_high, rope.mscale});
        for (const RopeHeads& h : sets)
            for (int64_t hh = 0; hh < h.n; ++hh) {
                float* xh = h.x.row(t) + hh * h.stride;
                if (h.norm) ops::rmsnorm(xh, h.norm, eps, head_dim, xh);
                ops::rope_apply(xh, rope.n_rot, rope.neox, cs_.data());
            }
    }
}

void CpuOps::kv_store(const Batch& batch, int64_t il, Tensor k, Tensor v) {
    const OpTimer tm = timed("kv_store", k.ne1);
    for (const BatchSeq& bs : batch.seqs)
        for (int64_t r = 0; r < bs.n; ++r)
            bs.state->kv->store(bs.state->kv_slot[static_cast<size_t>(il)], bs.pos0 + r, k.row(bs.row0 + r),
                                v.row(bs.row0 + r));
}

void CpuOps::attention(const Batch& batch, int64_t il, const AttnDims& d, Tensor q, int64_t head_stride, bool gated,
                       Tensor out) {
    const OpTimer tm = timed("attention", q.ne1);
    // Each query head's result is the same fixed sequence as ever (scores in position
    // order, softmax, weighted sum of V in position order) and depends only on its
    // token's query and the cache, never on the rest of the window. A task takes a run of
    // up to kRun consecutive tokens of one sequence and `span` query heads of one KV head's
    // group, so each cached K/V row is read and converted once for all of them
    // (ops::attend_tokens); the group is split only as far as needed to give every thread
    // a task (a decode step has one token): each split converts the head's K/V rows once
    // more (one task per thread instead of two: a small hybrid's decode at 2k positions
    // 1.02-1.17x as fast).
    constexpr int64_t kRun = 4;
    const int64_t T = q.ne1, hd = d.head_dim, hdv = d.head_dim_v, ldq = q.ld(), ldo = out.ld();
    row_seqs(batch);
    runs_.clear();
    // A sequence's rows in runs of equal length (9 rows: 3, 3, 3, not 4, 4, 1), so that a
    // window's tasks cost the same and no thread waits for another's longer last one.
    for (int64_t t0 = 0, t1; t0 < T; t0 = t1) {
        for (t1 = t0 + 1; t1 < T && row_seq_[t1] == row_seq_[t0];) ++t1;
        const int64_t n = t1 - t0, nr = (n + kRun - 1) / kRun;
        for (int64_t i = 0; i < nr; ++i) runs_.push_back(t0 + n * i / nr);
    }
    const int64_t n_runs = static_cast<int64_t>(runs_.size());
    runs_.push_back(T);
    const int64_t group = d.n_head / d.n_head_kv;
    int64_t span = group;
    while (span % 2 == 0 && n_runs * d.n_head_kv * (group / span) < pool_.size()) span /= 2;
    const int64_t n_split = group / span;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Tasks in KV-head-major order: ThreadPool::run hands each thread a contiguous range
    // of them, so a thread reads the cache of its own KV heads (and the same ones on every
    // call) rather than a share of every head's.
    pool_.run(n_runs * d.n_head_kv * n_split, [&](int64_t task) {
        const int64_t kvh = task / (n_runs * n_split), ri = task / n_split % n_runs;
        const int64_t t0 = runs_[static_cast<size_t>(ri)], n_tok = runs_[static_cast<size_t>(ri) + 1] - t0;
        const int64_t h0 = kvh * group + task % n_split * span;  // first query head of the task
        const BatchSeq& bs = batch.seqs[static_cast<size_t>(row_seq_[t0])];
        const KvCache& kv = *bs.state->kv;
        const int64_t kv_layer = bs.state->kv_slot[static_cast<size_t>(il)];
        const int64_t n_pos0 = bs.pos0 + (t0 - bs.row0) + 1;
        const ops::KvRows k_rows{kv.type(), kv.k_head(kv_layer, kvh), kv.k_stride()};
        const ops::KvRows v_rows{kv.type(), kv.v_head(kv_layer, kvh), kv.v_stride()};
        const float* q0 = q.row(t0) + h0 * head_stride;
        float* o0 = out.row(t0) + h0 * hdv;
        ops::attend_tokens(q0, ldq, head_stride, n_tok, span, hd, hdv, scale, k_rows, v_rows, n_pos0, o0, ldo, hdv);
        if (gated)
            for (int64_t tk = 0; tk < n_tok; ++tk)
                for (int64_t j = 0; j < span; ++j)
                    ops::sigmoid_mul(o0 + tk * ldo + j * hdv, q0 + tk * ldq + j * head_stride + hd, hdv);
    });
}

void CpuOps::gdn_gates(const GdnDims& d, Tensor ba, const float* a, const float* dt_bias, Tensor beta, Tensor g) {
    const OpTimer tm = timed("gdn_gates", ba.ne1);
    const int64_t nv = d.nv, r = nv / d.nk;
    for (int64_t t = 0; t < ba.ne1; ++t) {
        const float* bat = ba.row(t);
        for (int64_t hh = 0; hh < nv; ++hh) {
            // Where head hh's b and a logits lie (GdnDims::tiled).
            const int64_t ib = d.tiled ? hh : (hh / r) * 2 * r + hh % r, ia = d.tiled ? nv + hh : ib + r;
            beta.row(t)[hh] = ops::sigmoid(bat[ib]);
            g.row(t)[hh] = a[hh] * ops::softplus(bat[ia] + dt_bias[hh]);
        }
    }
}

void CpuOps::conv1d_silu(const GdnDims& d, Tensor x, const float* w, float* conv_state, Tensor u) {
    const OpTimer tm = timed("conv1d_silu", x.ne1);
    // Over [history (K-1 rows) ; the rows]: the last tap meets the current token; the new
    // history is the last K-1 rows.
    const int64_t cd = d.conv_dim(), K = d.conv_k, n = x.ne1;
    STRATA_CHECK(x.ne0 == cd && u.ne0 == cd, "conv1d: {} / {} channels, expected {}", x.ne0, u.ne0, cd);
    conv_in_.resize(static_cast<size_t>((K - 1 + n) * cd));
    float* X = conv_in_.data();
    // Chunks of whole 16-channel vectors, so a chunk boundary never splits one. Each
    // chunk gathers its own channels of the history and the rows and leaves its channels
    // of the new history: no pass over all the channels on one thread.
    pool_.parallel_for((cd + simd::kLanes - 1) / simd::kLanes, 4, [&](int64_t v0, int64_t v1) {
        const int64_t c0 = v0 * simd::kLanes, c1 = std::min(cd, v1 * simd::kLanes);
        const size_t bytes = sizeof(float) * static_cast<size_t>(c1 - c0);
        for (int64_t r = 0; r < K - 1; ++r) std::memcpy(X + r * cd + c0, conv_state + r * cd + c0, bytes);
        for (int64_t t = 0; t < n; ++t) std::memcpy(X + (K - 1 + t) * cd + c0, x.row(t) + c0, bytes);
        for (int64_t t = 0; t < n; ++t) ops::conv_silu(X + t * cd, cd, K, w, c0, c1, u.row(t));
        for (int64_t r = 0; r < K - 1; ++r) std::memcpy(conv_state + r * cd + c0, X + (n + r) * cd + c0, bytes);
    });
}

void CpuOps::gdn_recurrent(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o) {
    const OpTimer tm = timed("gdn_recurrent", u.ne1);
    STRATA_CHECK(u.contiguous() && g.contiguous() && beta.contiguous() && o.contiguous(),
                 "gdn_recurrent: strided views are not supported");
    ops::gdn_recurrent(pool_, heads(d), u.f(), g.f(), beta.f(), u.ne1, state, o.f());
}

void CpuOps::gdn_recurrent_from(const GdnDims& d, Tensor u, Tensor g, Tensor beta, const float* state_in, float* state,
                                Tensor o) {
    const OpTimer tm = timed("gdn_recurrent_from", u.ne1);
    STRATA_CHECK(u.contiguous() && g.contiguous() && beta.contiguous() && o.contiguous(),
                 "gdn_recurrent: strided views are not supported");
    ops::gdn_recurrent(pool_, heads(d), u.f(), g.f(), beta.f(), u.ne1, state, o.f(), state_in);
}

void CpuOps::gdn_chunked(const GdnDims& d, Tensor u, Tensor g, Tensor beta, float* state, Tensor o, int64_t chunk) {
    const OpTimer tm = timed("gdn_chunked", u.ne1);
    STRATA_CHECK(u.contiguous() && g.contiguous() && beta.contiguous() && o.contiguous(),
                 "gdn_chunked: strided views are not supported");
    ops::gdn_chunked(pool_, heads(d), u.f(), g.f(), beta.f(), u.ne1, state, o.f(), chunk);
}

namespace {

void top_k(const float* p, int64_t n, int64_t k, int32_t* idx) {
    // k is small (10 of 512): k passes of a strict '>' scan keep the lowest index on ties.
    for (int64_t s = 0; s < k; ++s) {
        int32_t best = -1;
        for (int64_t e = 0; e < n; ++e) {
            bool taken = false;
            for (int64_t q = 0; q < s; ++q) taken |= idx[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = static_cast<int32_t>(e);
        }
        idx[s] = best;
    }
}

}  // namespace

void CpuOps::topk_softmax(Tensor logits, int64_t k, int32_t* ids, float* wt) {
    const OpTimer tm = timed("topk_softmax", logits.ne1);
    const int64_t X = logits.ne0;
    for (int64_t t = 0; t < logits.ne1; ++t) {
        float* p = logits.row(t);
        ops::softmax(p, X);
        top_k(p, X, k, ids + t * k);
        float sum = 0.0f;
        for (int64_t s = 0; s < k; ++s) sum += p[ids[t * k + s]];
        sum = std::max(sum, 6.103515625e-5f);  // llama.cpp's clamp of the renormalizer
        for (int64_t s = 0; s < k; ++s) wt[t * k + s] = p[ids[t * k + s]] / sum;
    }
}

// Windows of up to this many rows run one task per expert (moe_ffn); decode steps and
// prompts split every expert's rows across the threads (matmul_grouped): a step has too
// few experts to keep the threads busy, a prompt's experts are too big to balance.
constexpr int64_t kFfnPerExpertRows = 16;

bool CpuOps::moe_experts(std::span<const MatView> gate, std::span<const MatView> up, std::span<const MatView> down,
                         const int32_t* ids, int64_t k, Tensor h, Tensor routed, const SharedExpert* shared) {
    const OpTimer tm = timed("moe_experts", h.ne1);
    const int64_t T = h.ne1, E = h.ne0, X = static_cast<int64_t>(gate.size());
    // Per expert, the list of (token, slot) pairs routed to it, so each expert runs one
    // batched matmul per weight over its rows; all experts' gate and up (and the shared
    // expert's, over every row) then go in one parallel run, and all their downs in
    // another (matmul_grouped: the same results as one matmul per expert and weight).
    // The products read an expert's tokens from h through the list (MatIn::rows) and
    // apply SwiGLU to the down's input as they quantize it (MatIn::gate): neither is a
    // pass of this thread alone while the others wait.
    start_.assign(static_cast<size_t>(X + 1), 0);
    for (int64_t i = 0; i < T * k; ++i) ++start_[ids[i] + 1];
    for (int64_t e = 0; e < X; ++e) start_[e + 1] += start_[e];
    order_.resize(static_cast<size_t>(T * k));
    tok_.resize(static_cast<size_t>(T * k));
    next_.assign(start_.begin(), start_.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) {  // i = t*k + slot
        const int32_t at = next_[ids[i]]++;
        order_[at] = static_cast<int32_t>(i);
        tok_[at] = static_cast<int32_t>(i / k);
    }

    if (T > 1 && T <= kFfnPerExpertRows) {
        // A window: one task per expert (moe_ffn), each writing its rows of routed.
        ffn_.clear();
        for (int64_t e = 0; e < X; ++e) {
            const int64_t r0 = start_[e], n = start_[e + 1] - r0;
            if (n == 0 || !gate[e].data) continue;
            ffn_.push_back({gate[e], up[e], down[e], {h.f(), h.ld(), n, tok_.data() + r0}, routed.f(), routed.ld(),
                            order_.data() + r0});
        }
        if (shared)
            ffn_.push_back({shared->gate, shared->up, shared->down, {h.f(), h.ld(), T}, shared->out.f(),
                            shared->out.ld(), nullptr});
        moe_ffn(pool_, ffn_);
        return true;
    }

    int64_t F = 0;
    for (int64_t e = 0; e < X; ++e)
        if (start_[e + 1] > start_[e] && gate[e].data) F = std::max(F, gate[e].n_out);
    const int64_t S = shared ? shared->gate.n_out : 0;  // the shared expert's rows follow the routed ones'
    if (F == 0 && S == 0) return true;  // no rows, or every expert computed elsewhere
    // With one token, every expert's gate and up read the same row: one input, quantized once.
    const bool one = T == 1;
    ge_.resize(static_cast<size_t>(T * (k * F + S)));
    ue_.resize(static_cast<size_t>(T * (k * F + S)));
    ye_.resize(static_cast<size_t>(T * k * E));
    float *gs = ge_.data() + T * k * F, *us = ue_.data() + T * k * F;
    ins_.clear();
    outs_.clear();
    in_of_.clear();
    if (one) ins_.push_back({h.f(), h.ld(), 1});
    for (int64_t e = 0; e < X; ++e) {
        const int64_t r0 = start_[e], n = start_[e + 1] - r0;
        if (n == 0 || !gate[e].data) continue;
        const int64_t f = gate[e].n_out;
        if (!one) ins_.push_back({h.f(), h.ld(), n, tok_.data() + r0});
        const int in = static_cast<int>(ins_.size()) - 1;
        outs_.push_back({gate[e], ge_.data() + r0 * F, f});
        outs_.push_back({up[e], ue_.data() + r0 * F, f});
        in_of_.insert(in_of_.end(), {in, in});
    }
    if (shared) {
        if (!one) ins_.push_back({h.f(), h.ld(), T});
        const int in = static_cast<int>(ins_.size()) - 1;
        outs_.push_back({shared->gate, gs, S});
        outs_.push_back({shared->up, us, S});
        in_of_.insert(in_of_.end(), {in, in});
    }
    strata::matmul_grouped(pool_, ins_, outs_, in_of_);

    // Every expert's down over silu(gate) * up of its own rows (the shared one's into its out).
    ins_.clear();
    outs_.clear();
    in_of_.clear();
    for (int64_t e = 0; e < X; ++e) {
        const int64_t r0 = start_[e], n = start_[e + 1] - r0;
        if (n == 0 || !gate[e].data) continue;
        const int64_t f = gate[e].n_out;
        in_of_.push_back(static_cast<int>(ins_.size()));
        ins_.push_back({ue_.data() + r0 * F, f, n, nullptr, ge_.data() + r0 * F});
        outs_.push_back({down[e], ye_.data() + r0 * E, E});
    }
    if (shared) {
        in_of_.push_back(static_cast<int>(ins_.size()));
        ins_.push_back({us, S, T, nullptr, gs});
        outs_.push_back({shared->down, shared->out.f(), shared->out.ld()});
    }
    strata::matmul_grouped(pool_, ins_, outs_, in_of_);
    for (int64_t e = 0; e < X; ++e) {
        if (!gate[e].data) continue;
        for (int64_t i = start_[e]; i < start_[e + 1]; ++i)
            std::memcpy(routed.row(order_[i]), ye_.data() + i * E, sizeof(float) * E);
    }
    return true;
}

void CpuOps::moe_combine(Tensor routed, const float* wt, int64_t k, Tensor shared, const float* shared_gate, Tensor h,
                         Tensor out) {
    const OpTimer tm = timed("moe_combine", out.ne1);
    const int64_t E = out.ne0;
    for (int64_t t = 0; t < out.ne1; ++t) {
        float* y = out.row(t);
        std::fill(y, y + E, 0.0f);
        for (int64_t s = 0; s < k; ++s) {
            const float ws = wt[t * k + s];
            const float* ys = routed.row(t * k + s);
            for (int64_t i = 0; i < E; ++i) y[i] += ws * ys[i];
        }
        if (!shared.data) continue;
        const float sg = ops::sigmoid(ops::dot(shared_gate, h.row(t), E));
        const float* sh = shared.row(t);
        for (int64_t i = 0; i < E; ++i) y[i] += sg * sh[i];
    }
}

void CpuOps::handoff_publish(Tensor x, Handoff& h, uint64_t window, bool drop) {
    const OpTimer tm = timed("handoff_publish", x.ne1);
    STRATA_CHECK(static_cast<size_t>(x.ne0 * x.ne1) <= h.capacity(), "hand-off: {} values, the payload holds {}",
                 x.ne0 * x.ne1, h.capacity());
    if (x.data != h.payload() || !x.contiguous())
        for (int64_t r = 0; r < x.ne1; ++r) std::memcpy(h.payload() + r * x.ne0, x.row(r), sizeof(float) * x.ne0);
    if (!drop) h.publish(window);  // release: the payload stores happen before the word
}

std::optional<Tensor> CpuOps::handoff_wait(Handoff& h, uint64_t window, int64_t timeout_ms, Tensor x) {
    const OpTimer tm = timed("handoff_wait", x.ne1);
    STRATA_CHECK(static_cast<size_t>(x.ne0 * x.ne1) <= h.capacity(), "hand-off: {} values, the payload holds {}",
                 x.ne0 * x.ne1, h.capacity());
    if (h.wait(window, timeout_ms) != Handoff::Wait::Ready) return std::nullopt;
    if (host_memory_) return Tensor::f32(h.payload(), x.ne0, x.ne1);  // the stage runs on the rows where they are
    for (int64_t r = 0; r < x.ne1; ++r) std::memcpy(x.row(r), h.payload() + r * x.ne0, sizeof(float) * x.ne0);
    return x;
}

}  // namespace strata
