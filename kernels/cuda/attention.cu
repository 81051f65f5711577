// Attention ops: the per-head norm and rotary embedding, stores into the KV cache, and
// causal attention over it. A row finds its sequence in the SeqTable (a handful of
// sequences, passed by value with the launch) and its position from the table's device
// copy of the first positions, so a decode step launches the same arguments at every
// position.
#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/compat.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gpu.h"

namespace strata::gpu {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHead = 512;  // head sizes the kernels keep in shared memory
// Attention's query heads per block: up to kMaxGroup of one KV head, their q and
// accumulators in kGroupFloats of shared memory each.
constexpr int kMaxGroup = 8, kGroupFloats = 4096;

// The most query heads of a KV head's group (a divisor of it) that one block takes.
int heads_per_block(int64_t group, int64_t hd, int64_t hdv) {
    int best = 1;
    for (int c = 1; c <= kMaxGroup && c <= group; ++c)
        if (group % c == 0 && c * std::max(hd, hdv) <= kGroupFloats) best = c;
    return best;
}
constexpr int64_t kFewRows = 16;
constexpr int64_t kAttnScratchFloats = int64_t{4} << 20;  // 16 MiB of partial sums per launch at most

// Parts of a row's positions for attention_part_k: one per 16 positions, at most
// kAttnMaxSplit (a long context then has ~n_pos / 32 positions per block). A decode
// step's row is a few blocks alone on the card: a part's positions are a chain of
// dependent reads, so shorter parts finish sooner (parts of 64 took 119 us on an H200
// for one row of 16 heads).
STRATA_DEV_HOST int attn_splits(int64_t n_pos) {
    const int64_t n = (n_pos + 15) / 16;
    return static_cast<int>(n < 1 ? 1 : (n > kAttnMaxSplit ? kAttnMaxSplit : n));
}

STRATA_DEV int seq_of(const SeqTable& t, int64_t row) {
    for (int i = 0; i < t.n; ++i)
        if (row >= t.s[i].row0 && row < t.s[i].row0 + t.s[i].n) return i;
    return -1;
}

// Value i of a cache row of type C (f32, f16, q8_0, q4_0): a template, so that the loops
// over positions hold no switch on the type and their loads can be issued ahead. Cache
// rows and their blocks start at even addresses (f32 rows at multiples of 4).
template <GgmlType C>
STRATA_DEV float kv_at(const uint8_t* row, int64_t i) {
    if constexpr (C == GgmlType::F32) {
        return reinterpret_cast<const float*>(row)[i];
    } else if constexpr (C == GgmlType::F16) {
        return fp16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
    } else if constexpr (C == GgmlType::Q8_0) {
        const uint8_t* b = row + (i / 32) * 34;
        return static_cast<float>(static_cast<int8_t>(b[2 + i % 32])) *
               fp16_to_f32(*reinterpret_cast<const uint16_t*>(b));
    } else {
        static_assert(C == GgmlType::Q4_0);
        const uint8_t* b = row + (i / 32) * 18;
        const int j = static_cast<int>(i % 32);
        const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
        return static_cast<float>(q - 8) * fp16_to_f32(*reinterpret_cast<const uint16_t*>(b));
    }
}

// The set and head of blockIdx.y among a's sets, in order (set a.n_sets: past them).
STRATA_DEV int rope_set_of(const RopeArgs& a, int64_t& h) {
    int set = 0;
    while (set < a.n_sets && h >= a.set[set].n) h -= a.set[set++].n;
    return set;
}

// One head x at position pos: the per-head RMS norm (with the set's weights, if any), then
// the rotary embedding. Every thread of the block calls it (block_sum's barriers).
STRATA_DEV void rope_head(float* x, const float* norm, int64_t pos, const RopeArgs& a, float* red) {
    if (norm) {
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) ss += x[i] * x[i];
        const float scale = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(a.head_dim) + a.eps);
        for (int64_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) x[i] = x[i] * scale * norm[i];
        __syncthreads();
    }
    const int64_t half = a.n_rot / 2;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        float theta = static_cast<float>(pos) * powf(a.freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(a.n_rot));
        if (a.ext_factor != 0.0f) {  // YaRN: interpolated and extrapolated angles mixed by the ramp
            const float extrap = a.freq_factors ? theta / a.freq_factors[i] : theta;
            const float y = (static_cast<float>(i) - a.corr_low) / fmaxf(0.001f, a.corr_high - a.corr_low);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * a.ext_factor;
            theta = a.freq_scale * extrap * (1.0f - mix) + extrap * mix;
        } else {
            theta *= a.freq_scale;
            if (a.freq_factors) theta /= a.freq_factors[i];
        }
        const float c = cosf(theta) * a.mscale, s = sinf(theta) * a.mscale;
        float* p0 = a.neox ? &x[i] : &x[2 * i];
        float* p1 = a.neox ? &x[i + half] : &x[2 * i + 1];
        const float x0 = *p0, x1 = *p1;
        *p0 = x0 * c - x1 * s;
        *p1 = x0 * s + x1 * c;
    }
}

// n values of src into a cache row at dst of type `type`. Every thread of the block calls
// it (the quantized types' barriers); vals: __shared__ float[blockDim.x] of the caller.
STRATA_DEV void store_head(const float* src, uint8_t* dst, GgmlType type, int64_t n, float* vals) {
    if (type == GgmlType::F32) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) copy_bytes(dst + 4 * i, src + i, 4);
    } else if (type == GgmlType::F16) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const uint16_t b = f32_to_fp16(src[i]);
            dst[2 * i] = static_cast<uint8_t>(b & 0xFF);
            dst[2 * i + 1] = static_cast<uint8_t>(b >> 8);
        }
    } else {
        // q8_0 / q4_0 as the host quantizers do it (engine/quant/quant_legacy.cpp), a block per warp pass
        for (int64_t b0 = 0; b0 < n; b0 += blockDim.x) {
            const int64_t i = b0 + threadIdx.x;
            const float val = i < n ? src[i] : 0.0f;
            // every thread of a 32-block needs the block's extreme: a reduction over its block
            const int64_t blk = i / 32;
            __syncthreads();
            vals[threadIdx.x] = val;
            __syncthreads();
            if (i < n) {
                const float* bv = vals + (threadIdx.x / 32) * 32;
                if (type == GgmlType::Q8_0) {
                    float amax = 0.0f;
                    for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(bv[j]));
                    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                    uint8_t* b = dst + blk * 34;
                    const uint16_t dh = f32_to_fp16(d);
                    if (i % 32 == 0) b[0] = static_cast<uint8_t>(dh & 0xFF), b[1] = static_cast<uint8_t>(dh >> 8);
                    b[2 + i % 32] = static_cast<uint8_t>(static_cast<int8_t>(roundf(fminf(fmaxf(val * id, -127.0f), 127.0f))));
                } else {
                    float amax = 0.0f, mx = 0.0f;
                    for (int j = 0; j < 32; ++j)
                        if (fabsf(bv[j]) > amax) amax = fabsf(bv[j]), mx = bv[j];
                    const float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                    uint8_t* b = dst + blk * 18;
                    const uint16_t dh = f32_to_fp16(d);
                    if (i % 32 == 0) b[0] = static_cast<uint8_t>(dh & 0xFF), b[1] = static_cast<uint8_t>(dh >> 8);
                    const float qf = fminf(val * id + 8.5f, 15.0f);
                    const int q = qf > 0.0f ? static_cast<int>(qf) : 0;
                    const int j = static_cast<int>(i % 32);
                    // two values share a byte: the low half's thread writes both
                    if (j < 16) {
                        const float v2 = bv[j + 16];
                        const float q2f = fminf(v2 * id + 8.5f, 15.0f);
                        const int q2 = q2f > 0.0f ? static_cast<int>(q2f) : 0;
                        b[2 + j] = static_cast<uint8_t>(q | (q2 << 4));
                    }
                }
            }
        }
    }
}

// A block per (row, head of the sets): rope_head.
__global__ void norm_rope_k(SeqTable seqs, RopeArgs a) {
    __shared__ float red[32];
    const int64_t t = blockIdx.x;
    const int si = seq_of(seqs, t);
    if (si < 0) return;
    int64_t h = blockIdx.y;
    const int set = rope_set_of(a, h);
    if (set >= a.n_sets) return;
    const RopeSet& rs = a.set[set];
    rope_head(rs.x + t * rs.ld + h * rs.stride, rs.norm, seqs.pos0[si] + (t - seqs.s[si].row0), a, red);
}

// One block per (row, KV head, k or v): store_head of the head into its cache row.
__global__ void kv_store_k(SeqTable seqs, GgmlType type, int64_t hd, int64_t hdv, Rows k, Rows v) {
    __shared__ float vals[kThreads];  // a pass's values: each 32-block's thread reads its block
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const bool is_v = blockIdx.z == 1;
    const int si = seq_of(seqs, t);
    if (si < 0) return;
    const SeqRows& sr = seqs.s[si];
    const int64_t pos = seqs.pos0[si] + (t - sr.row0), n = is_v ? hdv : hd;
    const float* src = (is_v ? v.p + t * v.ld : k.p + t * k.ld) + h * n;
    uint8_t* dst = is_v ? sr.v + h * sr.v_head + pos * sr.v_pos : sr.k + h * sr.k_head + pos * sr.k_pos;
    store_head(src, dst, type, n, vals);
}

// norm_rope_k's blocks, those of set kv.k_set (the K heads) then storing their head into
// the cache, and after them a block per (row, KV head) storing V: norm_rope and kv_store
// in one launch, the same bytes.
__global__ void norm_rope_kv_store_k(SeqTable seqs, RopeArgs a, KvStore kv) {
    __shared__ float red[32];
    __shared__ float vals[kThreads];
    const int64_t t = blockIdx.x;
    const int si = seq_of(seqs, t);
    if (si < 0) return;
    const SeqRows& sr = seqs.s[si];
    const int64_t pos = seqs.pos0[si] + (t - sr.row0);
    int64_t h = blockIdx.y;
    const int set = rope_set_of(a, h);
    if (set < a.n_sets) {
        const RopeSet& rs = a.set[set];
        float* x = rs.x + t * rs.ld + h * rs.stride;
        rope_head(x, rs.norm, pos, a, red);
        if (set != kv.k_set) return;  // the whole block
        __syncthreads();  // the head's values as the rotation left them
        store_head(x, sr.k + h * sr.k_head + pos * sr.k_pos, kv.type, a.head_dim, vals);
    } else if (h < kv.n_head_kv) {
        store_head(kv.v.p + t * kv.v.ld + h * kv.hdv, sr.v + h * sr.v_head + pos * sr.v_pos, kv.type, kv.hdv, vals);
    }
}

// Flash-decoding: the positions of a row are split into attn_splits(n_pos) parts (a
// function of the row's own position only, so a row's result never depends on the window
// it came in), one block per (row, group of query heads sharing a KV head, part). A
// block walks its part in tiles of blockDim positions: each warp takes positions in turn
// and sums q . k over the head with its lanes for every query head of the group (one
// cache row read contiguously, once for the group), then an online softmax per head over
// the tile and the weighted sums of V, threads over the value dimensions, each V value
// read once for the group. It leaves (max, sum, acc) of its part per head in `part`;
// combine_k merges the parts in order.
template <GgmlType C>
__global__ void attention_part_k(SeqTable seqs, int64_t row0, int64_t n_head, int64_t n_head_kv,
                                 int64_t hd, int64_t hdv, int gh, Rows q, int64_t head_stride, float* part) {
    __shared__ float red[32];
    __shared__ float qs[kGroupFloats];
    __shared__ float acc[kGroupFloats];
    __shared__ float w[kMaxGroup][kThreads];
    const int64_t t = row0 + blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * gh, sp = blockIdx.z;
    const int si = seq_of(seqs, t);
    if (si < 0) return;
    const SeqRows& sr = seqs.s[si];
    const int64_t n_pos = seqs.pos0[si] + (t - sr.row0) + 1, kvh = h0 / (n_head / n_head_kv);
    const int n_split = attn_splits(n_pos);
    if (sp >= n_split) return;
    const int64_t chunk = (n_pos + n_split - 1) / n_split, p_begin = sp * chunk;
    const int64_t p_end = p_begin + chunk < n_pos ? p_begin + chunk : n_pos;
    const float scale = 1.0f / sqrtf(static_cast<float>(hd));
    for (int g = 0; g < gh; ++g) {
        const float* qh = q.p + t * q.ld + (h0 + g) * head_stride;
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) qs[g * hd + i] = qh[i];
        for (int64_t i = threadIdx.x; i < hdv; i += blockDim.x) acc[g * hdv + i] = 0.0f;
    }
    __syncthreads();
    const uint8_t* kb = sr.k + kvh * sr.k_head;
    const uint8_t* vb = sr.v + kvh * sr.v_head;
    const int lane = static_cast<int>(threadIdx.x) % warpSize, warp = static_cast<int>(threadIdx.x) / warpSize;
    const int n_warps = static_cast<int>(blockDim.x) / warpSize;
    float m[kMaxGroup], l[kMaxGroup], alpha[kMaxGroup];
    for (int g = 0; g < kMaxGroup; ++g) m[g] = -INFINITY, l[g] = 0.0f, alpha[g] = 0.0f;
    for (int64_t p0 = p_begin; p0 < p_end; p0 += blockDim.x) {
        const int64_t n_tile = p_end - p0 < blockDim.x ? p_end - p0 : static_cast<int64_t>(blockDim.x);
        // Every warp runs the same number of rounds: a CPU HIP runtime's shuffles wait for
        // the whole block.
        for (int64_t j0 = 0; j0 < n_tile; j0 += n_warps) {
            const int64_t j = j0 + warp;
            float d[kMaxGroup] = {};
            if (j < n_tile) {
                const uint8_t* kr = kb + (p0 + j) * sr.k_pos;
                for (int64_t i = lane; i < hd; i += warpSize) {
                    const float kv = kv_at<C>(kr, i);
                    for (int g = 0; g < gh; ++g) d[g] += qs[g * hd + i] * kv;
                }
            }
            for (int g = 0; g < gh; ++g) {
                const float dg = warp_sum(d[g]);
                if (lane == 0 && j < n_tile) w[g][j] = dg * scale;
            }
        }
        __syncthreads();
        for (int g = 0; g < gh; ++g) {  // a thread reads and rewrites its own entry only
            const float s = threadIdx.x < n_tile ? w[g][threadIdx.x] : -INFINITY;
            const float m_new = fmaxf(m[g], block_max(s, red));
            const float e = threadIdx.x < n_tile ? expf(s - m_new) : 0.0f;
            alpha[g] = expf(m[g] - m_new);  // 0 on the first tile (m = -inf)
            l[g] = l[g] * alpha[g] + block_sum(e, red);
            m[g] = m_new;
            w[g][threadIdx.x] = e;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < hdv; i += blockDim.x) {
            float a[kMaxGroup];
            for (int g = 0; g < gh; ++g) a[g] = acc[g * hdv + i] * alpha[g];
            STRATA_UNROLL(4)
            for (int64_t j = 0; j < n_tile; ++j) {
                const float v = kv_at<C>(vb + (p0 + j) * sr.v_pos, i);
                for (int g = 0; g < gh; ++g) a[g] += w[g][j] * v;
            }
            for (int g = 0; g < gh; ++g) acc[g * hdv + i] = a[g];
        }
        __syncthreads();
    }
    for (int g = 0; g < gh; ++g) {
        float* o = part + ((blockIdx.x * n_head + h0 + g) * kAttnMaxSplit + sp) * (hdv + 2);
        if (threadIdx.x == 0) o[0] = m[g], o[1] = l[g];
        for (int64_t i = threadIdx.x; i < hdv; i += blockDim.x) o[2 + i] = acc[g * hdv + i];
    }
}

// One block per (row, query head): the parts merged in order, normalized, gated, and
// quantized into dq where it is given (the head's values in rounds of blockDim.x, every
// thread in each: the quantizer's shuffles; hdv a multiple of 32).
__global__ void combine_k(SeqTable seqs, int64_t row0, int64_t n_head, int64_t hd, int64_t hdv, Rows q,
                          int64_t head_stride, bool gated, const float* part, Rows out, ActQ dq) {
    const int64_t t = row0 + blockIdx.x, h = blockIdx.y;
    const int si = seq_of(seqs, t);
    if (si < 0) return;
    const SeqRows& sr = seqs.s[si];
    const int n_split = attn_splits(seqs.pos0[si] + (t - sr.row0) + 1);
    const float* p = part + (blockIdx.x * n_head + h) * kAttnMaxSplit * (hdv + 2);
    float m = -INFINITY;
    for (int s = 0; s < n_split; ++s) m = fmaxf(m, p[s * (hdv + 2)]);
    float l = 0.0f;
    for (int s = 0; s < n_split; ++s) l += p[s * (hdv + 2) + 1] * expf(p[s * (hdv + 2)] - m);
    const float* qh = q.p + t * q.ld + h * head_stride;
    float* o = out.p + t * out.ld + h * hdv;
    for (int64_t i0 = 0; i0 < hdv; i0 += blockDim.x) {
        const int64_t i = i0 + threadIdx.x;
        const bool in = i < hdv;
        float y = 0.0f;
        if (in) {
            float a = 0.0f;
            for (int s = 0; s < n_split; ++s) a += p[s * (hdv + 2) + 2 + i] * expf(p[s * (hdv + 2)] - m);
            y = a / l;
            if (gated) y *= 1.0f / (1.0f + expf(-qh[hd + i]));
            o[i] = y;
        }
        if (dq.q) quant_value(y, static_cast<int>(threadIdx.x % 32), in, dq, t, (h * hdv + i) / 32);
    }
}

gpuStream_t st(Stream s) { return static_cast<gpuStream_t>(s); }

}  // namespace

void norm_rope(const SeqTable& seqs, const RopeArgs& a, Stream s) {
    int64_t heads = 0, rows = 0;
    for (int i = 0; i < a.n_sets; ++i) heads += a.set[i].n;
    for (int i = 0; i < seqs.n; ++i) rows = std::max(rows, seqs.s[i].row0 + seqs.s[i].n);
    if (heads == 0 || rows == 0) return;
    launch(norm_rope_k, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads)), dim3(kThreads / 2), st(s),
           seqs, a);
    check_launch("norm_rope");
}

namespace {

void check_cache(GgmlType type) {
    STRATA_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::Q8_0 || type == GgmlType::Q4_0,
                 "kv_store: cache type {} has no GPU kernel", type_info(type).name);
}

}  // namespace

void norm_rope_kv_store(const SeqTable& seqs, const RopeArgs& a, const KvStore& kv, Stream s) {
    check_cache(kv.type);
    STRATA_CHECK(kv.k_set >= 0 && kv.k_set < a.n_sets && a.set[kv.k_set].n == kv.n_head_kv,
                 "norm_rope_kv_store: set {} of {} is not the {} K heads", kv.k_set, a.n_sets, kv.n_head_kv);
    int64_t heads = 0, rows = 0;
    for (int i = 0; i < a.n_sets; ++i) heads += a.set[i].n;
    for (int i = 0; i < seqs.n; ++i) rows = std::max(rows, seqs.s[i].row0 + seqs.s[i].n);
    if (rows == 0) return;
    launch(norm_rope_kv_store_k, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads + kv.n_head_kv)),
           dim3(kThreads / 2), st(s), seqs, a, kv);
    check_launch("norm_rope_kv_store");
}

void kv_store(const SeqTable& seqs, GgmlType type, int64_t n_head_kv, int64_t hd, int64_t hdv, Rows k, Rows v,
              Stream s) {
    check_cache(type);
    int64_t rows = 0;
    for (int i = 0; i < seqs.n; ++i) rows = std::max(rows, seqs.s[i].row0 + seqs.s[i].n);
    if (rows == 0) return;
    launch(kv_store_k, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(n_head_kv), 2), dim3(kThreads), st(s),
           seqs, type, hd, hdv, k, v);
    check_launch("kv_store");
}

int64_t attention_rows_per_launch(int64_t n_head, int64_t hdv) {
    const int64_t per_row = n_head * kAttnMaxSplit * (hdv + 2);
    return std::max<int64_t>(1, kAttnScratchFloats / per_row);
}

size_t attention_scratch_floats(int64_t rows, int64_t n_head, int64_t hdv) {
    return static_cast<size_t>(std::min(rows, attention_rows_per_launch(n_head, hdv)) * n_head * kAttnMaxSplit *
                               (hdv + 2));
}

void attention(const SeqTable& seqs, int64_t max_pos, GgmlType type, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t hdv,
               Rows q, int64_t head_stride, bool gated, Rows out, float* scratch, Stream s, const ActQ& digits) {
    STRATA_CHECK(!digits.q || hdv % 32 == 0, "attention: quantized output of heads of {} values", hdv);
    STRATA_CHECK(hd <= kMaxHead && hdv <= kMaxHead, "attention: head sizes {} / {} (the GPU kernel takes up to {})", hd,
                 hdv, kMaxHead);
    STRATA_CHECK(type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::Q8_0 || type == GgmlType::Q4_0,
                 "attention: cache type {} has no GPU kernel", type_info(type).name);
    int64_t rows = 0;
    for (int i = 0; i < seqs.n; ++i) rows = std::max(rows, seqs.s[i].row0 + seqs.s[i].n);
    if (rows == 0) return;
    // A window of few rows (decode, verify) launches every part a row could have; the
    // parts past its own count return at once. Its launch is then the same at every
    // position, so a decode step stays one graph (kernels/cuda/graph.cu) as the context grows.
    const unsigned splits = static_cast<unsigned>(rows <= kFewRows ? kAttnMaxSplit : attn_splits(max_pos));
    const int64_t group = attention_rows_per_launch(n_head, hdv);
    // A few rows take a block per query head: a decode step's few blocks were its time
    // (a head's sums are the same whichever heads share its block).
    const int gh = rows <= kFewRows ? 1 : heads_per_block(n_head / n_head_kv, hd, hdv);
    for (int64_t r0 = 0; r0 < rows; r0 += group) {
        const unsigned n = static_cast<unsigned>(std::min(group, rows - r0)), heads = static_cast<unsigned>(n_head);
        const dim3 grid(n, static_cast<unsigned>(n_head / gh), splits);
        const auto go = [&](auto kernel) {
            launch(kernel, grid, dim3(kThreads), st(s), seqs, r0, n_head, n_head_kv, hd, hdv, gh, q, head_stride,
                   scratch);
        };
        switch (type) {
            case GgmlType::F32: go(attention_part_k<GgmlType::F32>); break;
            case GgmlType::F16: go(attention_part_k<GgmlType::F16>); break;
            case GgmlType::Q8_0: go(attention_part_k<GgmlType::Q8_0>); break;
            default: go(attention_part_k<GgmlType::Q4_0>); break;
        }
        launch(combine_k, dim3(n, heads), dim3(kThreads), st(s), seqs, r0, n_head, hd, hdv, q, head_stride, gated,
               scratch, out, digits);
    }
    check_launch("attention");
}

}  // namespace strata::gpu
