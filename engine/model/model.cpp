#include "engine/model/model.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/model/streaming.h"
#include "engine/model/weights.h"

namespace strata {

std::unique_ptr<Model> make_dense_model(GgufFile file);      // engine/model/llama.cpp
std::unique_ptr<Model> make_qwen3next_model(GgufFile file, std::unique_ptr<GgufFile> mtp);  // engine/model/qwen3next.cpp

namespace {

// An MTP-only sidecar describes the same model as the main file: its hyperparameters
// must be the main file's, with its MTP blocks counted after the same main stack.
void check_sidecar(const HParams& main, const HParams& side, const GgufFile& f) {
    const auto same = [&](const char* what, auto a, auto b) {
        if (a != b) fail("{}: {} is {} in this MTP file and {} in the model", f.path(), what, b, a);
    };
    same("the architecture", main.arch_name, side.arch_name);
    if (side.n_nextn <= 0) fail("{}: not an MTP file (nextn_predict_layers is 0)", f.path());
    if (f.find_tensor("blk.0.attn_norm.weight"))
        fail("{}: not an MTP-only file (it holds main layers); load it as the model instead", f.path());
    if (main.n_nextn > 0) fail("{}: the model already holds an MTP block; drop the MTP file", f.path());
    same("the main layer count", main.n_layer, side.n_layer);
    same("embedding_length", main.n_embd, side.n_embd);
    same("the vocabulary size", main.n_vocab, side.n_vocab);
    same("attention.head_count", main.n_head, side.n_head);
    same("attention.head_count_kv", main.n_head_kv, side.n_head_kv);
    same("attention.key_length", main.head_dim, side.head_dim);
    same("attention.value_length", main.head_dim_v, side.head_dim_v);
    same("rope.dimension_count", main.n_rot, side.n_rot);
    same("rope.freq_base", main.rope_freq_base, side.rope_freq_base);
    same("the rope scale", main.rope_freq_scale, side.rope_freq_scale);
    same("the rms epsilon", main.rms_eps, side.rms_eps);
    same("feed_forward_length", main.n_ff, side.n_ff);
    same("expert_count", main.n_expert, side.n_expert);
    same("expert_used_count", main.n_expert_used, side.n_expert_used);
    same("expert_feed_forward_length", main.n_ff_exp, side.n_ff_exp);
    same("expert_shared_feed_forward_length", main.n_ff_shexp, side.n_ff_shexp);
}

}  // namespace

Model::Model(GgufFile file, std::unique_ptr<GgufFile> mtp_file)
    : file_(std::move(file)), hp_(HParams::from_gguf(file_)), mtp_file_(std::move(mtp_file)) {
    WeightBinder b(file_, bound_);
    tok_embd_ = b.mat("token_embd.weight", hp_.n_embd, hp_.n_vocab);
    output_ = b.has("output.weight") ? b.mat("output.weight", hp_.n_embd, hp_.n_vocab) : tok_embd_;  // tied
    output_norm_ = b.vec("output_norm.weight", hp_.n_embd);
    // Llama 3.1+: the llama3 frequency factors as a tensor (the converter writes no
    // scaling keys for them); each rotated pair's angle is divided by its factor.
    if (b.has("rope_freqs.weight")) rope_freqs_ = b.vec("rope_freqs.weight", hp_.n_rot / 2);
    if (!mtp_file_) return;
    const HParams side = HParams::from_gguf(*mtp_file_);
    check_sidecar(hp_, side, *mtp_file_);
    hp_.n_nextn = side.n_nextn;
    // The converter copies the embedding table, the output norm and the head into the
    // sidecar; the MTP block reads the main file's (the same tensors), so these must be
    // the main file's in type and shape.
    for (const char* name : {"token_embd.weight", "output.weight", "output_norm.weight"}) {
        const GgufTensorInfo* t = mtp_file_->find_tensor(name);
        if (!t) continue;
        const GgufTensorInfo* m = file_.find_tensor(name);
        if (!m || m->type != t->type || m->ne != t->ne)
            fail("{}: its {} differs from the model's in type or shape", mtp_file_->path(), name);
        mtp_bound_.insert(name);
    }
}

void* Scratch::alloc(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;  // every buffer on its own cache lines
    auto& [c, off] = top_;
    while (c < chunks_.size() && off + bytes > chunks_[c].size()) ++c, off = 0;  // rest of a chunk: unused
    if (c == chunks_.size()) {
        constexpr size_t kChunk = size_t{4} << 20;
        chunks_.push_back(alloc_(std::max(kChunk, bytes)));  // zeroed, 64-byte aligned
    }
    void* p = static_cast<std::byte*>(chunks_[c].data()) + off;
    off += bytes;
    return p;
}

size_t Scratch::capacity() const {
    size_t n = 0;
    for (const Buffer& c : chunks_) n += c.size();
    return n;
}

const int32_t* ForwardCtx::in_ids(const int32_t* host, int64_t n, int64_t rows) {
    for (int64_t i = 0; i < n; ++i)
        if (host[i] < 0 || host[i] >= rows) fail("token id {} is out of range (vocabulary has {})", host[i], rows);
    if (ops.host_memory()) return host;
    int32_t* d = scratch.ints(static_cast<size_t>(n));
    ops.to_device(d, host, sizeof(int32_t) * static_cast<size_t>(n));
    return d;
}

const float* ForwardCtx::in_rows(const float* host, size_t floats) {
    if (ops.host_memory()) return host;
    float* d = scratch.floats(floats);
    ops.to_device(d, host, sizeof(float) * floats);
    return d;
}

float* ForwardCtx::out_rows(float* host, size_t floats) { return ops.host_memory() ? host : scratch.floats(floats); }

void ForwardCtx::out_done(float* host, const float* dev, size_t floats) {
    if (dev != host) ops.to_host(host, dev, sizeof(float) * floats);
}

ForwardCtx::ForwardCtx(Ops& o, const Model& m) : ops(o), owned_(m.bind(o)), weights(owned_.get()), scratch(o.allocator()) {}

std::unique_ptr<Model> Model::load(const std::string& path, const std::string& mtp_path) {
    GgufFile f = GgufFile::open(path);
    return load(std::move(f), mtp_path.empty() ? nullptr : std::make_unique<GgufFile>(GgufFile::open(mtp_path)));
}

std::unique_ptr<Model> Model::load(GgufFile file, std::unique_ptr<GgufFile> mtp_file) {
    const HParams hp = HParams::from_gguf(file);
    std::unique_ptr<Model> m;
    switch (hp.arch) {
        case Arch::Llama:
        case Arch::Qwen3:
        case Arch::Qwen3Moe:
            if (mtp_file)
                fail("{}: an MTP file was given, but Strata's {} model has no MTP block (qwen3next, qwen35 and "
                     "qwen35moe have)", mtp_file->path(), arch_name(hp.arch));
            m = make_dense_model(std::move(file));
            break;
        case Arch::Qwen3Next:
        case Arch::Qwen35:
        case Arch::Qwen35Moe: m = make_qwen3next_model(std::move(file), std::move(mtp_file)); break;
    }
    m->check_bound();
    return m;
}

void Model::check_bound() const {
    const auto check = [&](const GgufFile& f, const std::set<std::string>& bound) {
        for (const GgufTensorInfo& t : f.tensors())
            if (!bound.count(t.name))
                fail("{}: tensor '{}' is not used by Strata's {} model; computing without it would give wrong "
                     "results", f.path(), t.name, arch_name(hp_.arch));
    };
    check(file_, bound_);
    if (mtp_file_) check(*mtp_file_, mtp_bound_);
}

SeqState Model::new_state(Ops& ops, int64_t n_ctx, GgmlType cache_type, int64_t l0, int64_t l1, bool with_mtp) const {
    STRATA_CHECK(n_ctx > 0, "context length must be positive, got {}", n_ctx);
    if (l1 < 0) l1 = hp_.n_layer;
    STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= hp_.n_layer, "state for layers [{}, {}) outside 0..{}", l0, l1, hp_.n_layer);
    SeqState s;
    s.n_ctx = n_ctx;
    int64_t n_attn = 0;
    s.kv_slot.assign(static_cast<size_t>(hp_.n_layer), -1);
    for (int64_t il = l0; il < l1; ++il)
        if (!hp_.is_recurrent(il)) s.kv_slot[il] = n_attn++;
    for (int64_t i = 0; i < hp_.n_nextn; ++i) s.kv_slot.push_back(with_mtp ? n_attn++ : -1);  // MTP blocks: attention
    // Gated DeltaNet layers (qwen3next): conv history + delta-rule state per layer.
    s.gdn_slot.assign(static_cast<size_t>(hp_.n_layer), -1);
    int64_t n_rec = 0;
    for (int64_t il = l0; il < l1; ++il)
        if (hp_.is_recurrent(il)) s.gdn_slot[il] = n_rec++;
    if (n_rec > 0)
        s.gdn = std::make_unique<GdnState>(ops.allocator(), n_rec, hp_.ssm_conv_kernel, 2 * hp_.ssm_n_group * hp_.ssm_d_state + hp_.ssm_d_inner,
                                           hp_.ssm_dt_rank, hp_.ssm_d_state, hp_.ssm_d_inner / hp_.ssm_dt_rank);
    const int64_t bs = type_info(cache_type).block_size;
    if (hp_.head_dim % bs != 0 || hp_.head_dim_v % bs != 0)
        fail("cache type {} needs a head size that is a multiple of {}, this model's is {}",
             type_info(cache_type).name, bs, hp_.head_dim);
    s.kv = std::make_unique<KvCache>(ops.allocator(), n_attn, n_ctx, hp_.n_head_kv, hp_.head_dim, hp_.head_dim_v, cache_type);
    return s;
}

bool Model::can_replay_log(const StageWeights& w, const SeqState& s, int64_t n) const {
    if (!s.gdn) return true;
    if (!s.gdn_log || !s.gdn_log->covers(n)) return false;
    for (int64_t il = w.l0; il < w.l1; ++il)
        if (s.gdn_slot[static_cast<size_t>(il)] >= 0 && !w.resident[static_cast<size_t>(il - w.l0)]) return false;
    return true;
}

void Model::embed(ForwardCtx& ctx, const int32_t* tokens, int64_t T, float* x) const {
    STRATA_CHECK(ctx.weights && ctx.weights->embed, "embed: this stage did not bind the embedding table");
    const Scratch::Frame frame(ctx.scratch);
    ctx.ops.get_rows(ctx.weights->tok_embd, ctx.in_ids(tokens, T, ctx.weights->tok_embd.n_out), Tensor::f32(x, hp_.n_embd, T));
}

void Model::run_layers(ForwardCtx& ctx, const Batch& batch, int64_t l0, int64_t l1, float* x) const {
    STRATA_CHECK(0 <= l0 && l0 <= l1 && l1 <= hp_.n_layer, "layer range [{}, {}) outside 0..{}", l0, l1, hp_.n_layer);
    STRATA_CHECK(ctx.weights && ctx.weights->l0 <= l0 && l1 <= ctx.weights->l1,
                 "layers [{}, {}) are not bound on this stage", l0, l1);
    for (int64_t il = l0; il < l1; ++il) {
        if (ctx.weights->stream) ctx.weights->stream->enter(ctx.ops, il);
        layer(ctx, batch, il, x);
    }
}

void Model::output(ForwardCtx& ctx, const Batch& batch, const float* x, std::span<const OutputWant> want,
                   float* logits_rows) const {
    STRATA_CHECK(want.size() == batch.seqs.size(), "output: {} wants for {} sequences", want.size(), batch.seqs.size());
    const int64_t E = hp_.n_embd;
    // Normalize only the rows somebody reads: every row of a sequence that wants hidden
    // states, the logit rows into one block for a single head pass.
    const Scratch::Frame frame(ctx.scratch);
    const Tensor xs = Tensor::f32(x, E, batch.n_rows);
    const Tensor sel = ctx.scratch.rows(E, batch.n_rows);  // [n_sel, n_embd]
    int64_t n_sel = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const BatchSeq& s = batch.seqs[i];
        if (want[i].hidden_out) {
            const size_t n = static_cast<size_t>(s.n * E);
            float* h = ctx.out_rows(want[i].hidden_out, n);
            ctx.ops.rms_norm(xs.rows(s.row0, s.n), ctx.weights->output_norm.data(), hp_.rms_eps, Tensor::f32(h, E, s.n));
            ctx.out_done(want[i].hidden_out, h, n);
        }
        if (!logits_rows) continue;
        const int64_t n = want[i].all_logits ? s.n : 1;
        ctx.ops.rms_norm(xs.rows(s.row0 + s.n - n, n), ctx.weights->output_norm.data(), hp_.rms_eps, sel.rows(n_sel, n));
        n_sel += n;
    }
    if (logits_rows && n_sel > 0) {
        STRATA_CHECK(ctx.weights && ctx.weights->head, "output: this stage did not bind the LM head");
        const size_t n = static_cast<size_t>(n_sel * hp_.n_vocab);
        float* logits = ctx.out_rows(logits_rows, n);
        ctx.ops.matmul(ctx.weights->output, sel.rows(0, n_sel), Tensor::f32(logits, hp_.n_vocab, n_sel));
        ctx.out_done(logits_rows, logits, n);
    }
}

void Model::mtp_forward(ForwardCtx&, SeqState&, const float*, const int32_t*, int64_t, int64_t, float*, float*,
                        bool, int64_t) const {
    fail("{}: this model has no MTP (nextn) block", file_.path());
}

void Model::eval(ForwardCtx& ctx, SeqState& state, std::span<const int32_t> tokens, float* logits,
                 bool all_logits) const {
    const BatchItem item{&state, tokens, all_logits};
    eval_batch(ctx, std::span<const BatchItem>(&item, 1), logits);
}

void Model::eval_batch(ForwardCtx& ctx, std::span<const BatchItem> items, float* logits_rows) const {
    Batch batch;
    for (const BatchItem& it : items) {
        const int64_t T = static_cast<int64_t>(it.tokens.size());
        STRATA_CHECK(T > 0, "eval: no tokens");
        if (it.state->n_past + T > it.state->n_ctx)
            fail("the prompt needs {} positions but the context holds {} ({} already used)", it.state->n_past + T,
                 it.state->n_ctx, it.state->n_past);
        batch.add(*it.state, it.state->n_past, T);
    }
    const int64_t E = hp_.n_embd;
    const Scratch::Frame frame(ctx.scratch);
    float* x = ctx.scratch.floats(static_cast<size_t>(batch.n_rows * E));
    for (size_t i = 0; i < items.size(); ++i)
        embed(ctx, items[i].tokens.data(), batch.seqs[i].n, x + batch.seqs[i].row0 * E);
    run_layers(ctx, batch, 0, hp_.n_layer, x);
    std::vector<OutputWant> want;
    want.reserve(items.size());
    for (const BatchItem& it : items) want.push_back({it.all_logits, it.hidden_out});
    output(ctx, batch, x, want, logits_rows);
    for (const BatchSeq& s : batch.seqs) s.state->n_past += s.n;
}

}  // namespace strata
