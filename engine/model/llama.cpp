// Decoder of pre-norm attention and FFN with residuals (llama, qwen3, qwen3moe).
// MODEL_SPEC.md 3.5. qwen3 differs by its per-head q/k norms and NEOX rotary; qwen3moe
// is qwen3 with routed experts (no shared one) in place of the SwiGLU FFN.
#include "engine/model/blocks.h"
#include "engine/model/moe.h"
#include "engine/model/weights.h"

namespace strata {
namespace {

struct DenseLayer final : LayerWeights {
    AttnWeights attn;
    WeightVec ffn_norm;  // [n_embd]
    FfnWeights ffn;      // dense FFN (llama, qwen3) ...
    MoeWeights moe;      // ... or routed experts (qwen3moe)
    bool routed = false;
};

class DenseModel final : public Model {
public:
    explicit DenseModel(GgufFile f) : Model(std::move(f), nullptr) {
        WeightBinder b(file_, bound_);
        const HParams& h = hp_;
        for (int64_t il = 0; il < h.n_layer; ++il) {
            const std::string p = "blk." + std::to_string(il) + ".";
            DenseLayer L;
            L.attn.norm = b.vec(p + "attn_norm.weight", h.n_embd);
            L.attn.wq = b.mat(p + "attn_q.weight", h.n_embd, h.n_q());
            L.attn.wk = b.mat(p + "attn_k.weight", h.n_embd, h.n_kv());
            L.attn.wv = b.mat(p + "attn_v.weight", h.n_embd, h.n_head_kv * h.head_dim_v);
            L.attn.wo = b.mat(p + "attn_output.weight", h.n_head * h.head_dim_v, h.n_embd);
            if (h.arch != Arch::Llama) {
                L.attn.q_norm = b.vec(p + "attn_q_norm.weight", h.head_dim);
                L.attn.k_norm = b.vec(p + "attn_k_norm.weight", h.head_dim);
            }
            L.ffn_norm = b.vec(p + "ffn_norm.weight", h.n_embd);
            L.routed = h.n_expert > 0;
            if (L.routed) {
                L.moe = bind_moe(b, h, p, il);
            } else {
                L.ffn.gate = b.mat(p + "ffn_gate.weight", h.n_embd, h.n_ff);
                L.ffn.up = b.mat(p + "ffn_up.weight", h.n_embd, h.n_ff);
                L.ffn.down = b.mat(p + "ffn_down.weight", h.n_ff, h.n_embd);
            }
            layers_.push_back(std::move(L));
        }
    }

protected:
    void layer(ForwardCtx& ctx, const Batch& batch, int64_t il, float* x) const override {
        const auto& L = static_cast<const DenseLayer&>(ctx.weights->layer(il));
        const int64_t T = batch.n_rows;
        const int64_t n = hp_.n_embd;
        const Tensor xs = Tensor::f32(x, n, T);
        const Scratch::Frame frame(ctx.scratch);
        const Tensor h = ctx.scratch.rows(n, T), out = ctx.scratch.rows(n, T);  // normed input, block output
        ctx.ops.rms_norm(xs, L.attn.norm.data(), hp_.rms_eps, h);
        attention_block(ctx, hp_, L.attn, batch, il, h.f(), out.f());
        ctx.ops.add(xs, out);
        ctx.ops.rms_norm(xs, L.ffn_norm.data(), hp_.rms_eps, h);
        if (L.routed) moe_block(ctx, hp_, L.moe, h.f(), T, out.f());
        else ffn_block(ctx, L.ffn, h.f(), T, n, out.f());
        ctx.ops.add(xs, out);
    }

    std::unique_ptr<LayerWeights> place_layer(WeightPlacer& p, int64_t il) const override {
        auto L = std::make_unique<DenseLayer>(layers_[static_cast<size_t>(il)]);
        prepare(p, L->attn);
        if (L->routed) prepare(p, L->moe);
        else prepare(p, L->ffn);
        L->ffn_norm.prepare(p);
        return L;
    }

private:
    std::vector<DenseLayer> layers_;  // as bound from the file
};

}  // namespace

std::unique_ptr<Model> make_dense_model(GgufFile file) { return std::make_unique<DenseModel>(std::move(file)); }

}  // namespace strata
