// What GpuOps' files share (gpu_ops.cpp, gpu_ops_layers.cpp): tensors as the kernels'
// rows and weights, and the overlap tests that decide whether held work may wait.
#pragma once
#include <cstddef>

#include "engine/backend/ops.h"
#include "engine/core/error.h"
#include "kernels/cuda/gpu.h"

namespace strata::gpu_ops_detail {

inline gpu::Rows rows(Tensor t) {
    STRATA_CHECK(t.type == GgmlType::F32, "GPU ops take f32 rows");
    return {t.f(), t.ne0, t.ne1, t.ld()};
}

inline gpu::Weight weight(const MatView& w) {
    return {w.type, 0, static_cast<const uint8_t*>(w.data), w.n_in, w.n_out, w.row_stride};
}

// Whether two weights are alike for one table of experts (one kernel, one row stride).
inline bool same_shape(const MatView& a, const MatView& b) {
    return a.type == b.type && a.n_in == b.n_in && a.n_out == b.n_out && a.row_stride == b.row_stride;
}

inline bool overlaps(const gpu::Rows& r, const void* p, size_t bytes) {
    if (r.rows == 0 || bytes == 0) return false;
    const auto* a = static_cast<const char*>(p);
    const auto* b = reinterpret_cast<const char*>(r.p);
    return a < b + sizeof(float) * static_cast<size_t>((r.rows - 1) * r.ld + r.cols) && b < a + bytes;
}

inline bool overlaps(const gpu::Rows& r, const gpu::Rows& q) {
    return q.rows > 0 && overlaps(r, q.p, sizeof(float) * static_cast<size_t>((q.rows - 1) * q.ld + q.cols));
}

inline bool same_rows(const gpu::Rows& a, const gpu::Rows& b) {
    return a.p == b.p && a.cols == b.cols && a.rows == b.rows && a.ld == b.ld;
}

// Whether writing r leaves a held MoE combine's inputs and its output out (none: rows 0)
// as they are until its kernel has read them (moe_combine_add_rms_norm_q writes x and y):
// r is none of them, or (h_ok) exactly the gate's input h, which each of that kernel's
// rows reads before it writes the row.
inline bool clear_of(const gpu::MoeCombine& c, const gpu::Rows& out, const gpu::Rows& r, bool h_ok) {
    const size_t wt_bytes = sizeof(float) * static_cast<size_t>(c.k * out.rows);
    return !overlaps(c.routed, r) && !overlaps(c.shared, r) && !overlaps(out, r) && !overlaps(r, c.wt, wt_bytes) &&
           (!overlaps(c.h, r) || (h_ok && same_rows(c.h, r)));
}


}  // namespace strata::gpu_ops_detail
