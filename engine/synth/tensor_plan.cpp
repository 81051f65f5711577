#include "engine/synth/tensor_plan.h"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata::synth {

int64_t TensorPlan::n_elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

GgmlType fit_type(GgmlType want, int64_t row_len) {
    if (row_len % type_info(want).block_size == 0) return want;
    if (row_len % type_info(GgmlType::Q8_0).block_size == 0) return GgmlType::Q8_0;
    return GgmlType::F16;
}

namespace {

class Builder {
public:
    explicit Builder(GgmlType wtype) : wtype_(wtype) {}

    // A weight matrix (2-D or stacked 3-D experts): stored in the requested type.
    void mat(std::string name, std::vector<int64_t> ne, Init init = Init::Matrix) {
        add(std::move(name), std::move(ne), init, true);
    }
    // Norms, biases, router, ssm_a/dt/conv: F32, as llama.cpp keeps them (MODEL_SPEC 1.7).
    void f32(std::string name, std::vector<int64_t> ne, Init init) {
        add(std::move(name), std::move(ne), init, false);
    }

    ModelPlan finish() {
        for (const auto& [key, names] : fallbacks_) {
            const auto& [want, got, row] = key;
            std::string list;
            for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
            if (names.size() > 3) list += ", ...";
            plan_.notes.push_back(fmt::format(
                "{} tensor(s) with rows of {} values are not a multiple of the {}-value {} block; "
                "stored as {} instead: {}",
                names.size(), row, type_info(want).block_size, type_info(want).name,
                type_info(got).name, list));
        }
        return std::move(plan_);
    }

private:
    void add(std::string name, std::vector<int64_t> ne, Init init, bool matrix) {
        TensorPlan t;
        t.type = GgmlType::F32;
        if (matrix) {
            t.type = fit_type(wtype_, ne[0]);
            if (t.type != wtype_) fallbacks_[{wtype_, t.type, ne[0]}].push_back(name);
        }
        t.name = std::move(name);
        t.ne = std::move(ne);
        t.init = init;
        t.weight_matrix = matrix;
        plan_.tensors.push_back(std::move(t));
    }

    GgmlType wtype_;
    ModelPlan plan_;
    std::map<std::tuple<GgmlType, GgmlType, int64_t>, std::vector<std::string>> fallbacks_;
};

std::string blk(int64_t il, const char* rest) { return fmt::format("blk.{}.{}", il, rest); }

// The routed experts of a MoE FFN (MODEL_SPEC 4.8, 5.2).
void routed_experts(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd, X = c.n_expert;
    b.f32(blk(il, "ffn_gate_inp.weight"), {E, X}, Init::Matrix);                   // [n_embd, n_expert] router
    b.mat(blk(il, "ffn_gate_exps.weight"), {E, c.n_ff_exp, X});                    // [n_embd, n_ff_exp, n_expert]
    b.mat(blk(il, "ffn_up_exps.weight"), {E, c.n_ff_exp, X});                      // [n_embd, n_ff_exp, n_expert]
    b.mat(blk(il, "ffn_down_exps.weight"), {c.n_ff_exp, E, X}, Init::ResidOut);    // [n_ff_exp, n_embd, n_expert]
}

// llama / qwen3 / qwen3moe decoder layer (MODEL_SPEC 3.2; qwen3moe: the FFN is routed experts).
void dense_layer(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
    b.f32(blk(il, "attn_norm.weight"), {E}, Init::Norm);                 // [n_embd]
    b.mat(blk(il, "attn_q.weight"), {E, q});                             // [n_embd, n_head*hd]
    b.mat(blk(il, "attn_k.weight"), {E, kv});                            // [n_embd, n_head_kv*hd]
    b.mat(blk(il, "attn_v.weight"), {E, kv});                            // [n_embd, n_head_kv*hd]
    if (c.arch != Arch::Llama) {
        b.f32(blk(il, "attn_q_norm.weight"), {c.head_dim}, Init::Norm);  // [hd]
        b.f32(blk(il, "attn_k_norm.weight"), {c.head_dim}, Init::Norm);  // [hd]
    }
    b.mat(blk(il, "attn_output.weight"), {q, E}, Init::ResidOut);        // [n_head*hd, n_embd]
    b.f32(blk(il, "ffn_norm.weight"), {E}, Init::Norm);                  // [n_embd]
    if (c.moe()) return routed_experts(b, c, il);
    b.mat(blk(il, "ffn_gate.weight"), {E, c.n_ff});                      // [n_embd, n_ff]
    b.mat(blk(il, "ffn_up.weight"), {E, c.n_ff});                        // [n_embd, n_ff]
    b.mat(blk(il, "ffn_down.weight"), {c.n_ff, E}, Init::ResidOut);      // [n_ff, n_embd]
}

// Qwen3-Next gated full attention (MODEL_SPEC 4.7, 5.2). Norms are stored with the
// zero-centered "+1" already applied, so values near 1 are what a converted file holds.
void qwen3next_attention(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd, hd = c.head_dim;
    b.mat(blk(il, "attn_q.weight"), {E, 2 * c.n_head * hd});            // [n_embd, n_head*hd*2] per head [query | gate]
    b.mat(blk(il, "attn_k.weight"), {E, c.n_head_kv * hd});              // [n_embd, n_head_kv*hd]
    b.mat(blk(il, "attn_v.weight"), {E, c.n_head_kv * hd});              // [n_embd, n_head_kv*hd]
    b.mat(blk(il, "attn_output.weight"), {c.n_head * hd, E}, Init::ResidOut);  // [n_head*hd, n_embd]
    b.f32(blk(il, "attn_q_norm.weight"), {hd}, Init::Norm);             // [hd]
    b.f32(blk(il, "attn_k_norm.weight"), {hd}, Init::Norm);             // [hd]
}

// Qwen3-Next Gated DeltaNet (MODEL_SPEC 4.4, 4.5, 5.2).
void qwen3next_gdn(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd, nv = c.ssm_dt_rank;
    const int64_t key_dim = c.ssm_key_dim(), value_dim = c.ssm_d_inner(), conv_dim = c.ssm_conv_dim();
    if (c.qwen35() || c.gdn_layout == GdnLayout::Split) {
        b.mat(blk(il, "attn_qkv.weight"), {E, conv_dim});                // [n_embd, 2*key_dim + value_dim]
        b.mat(blk(il, "attn_gate.weight"), {E, value_dim});              // [n_embd, value_dim] (z)
    } else {
        b.mat(blk(il, "ssm_in.weight"), {E, 2 * key_dim + 2 * value_dim});  // [n_embd, qkvz] HF interleave
    }
    if (c.qwen35()) {  // separate gate projections, value heads tiled (docs/qwen35.md 2.2, 2.3)
        b.mat(blk(il, "ssm_beta.weight"), {E, nv});                      // [n_embd, nv]
        b.mat(blk(il, "ssm_alpha.weight"), {E, nv});                     // [n_embd, nv]
    } else {
        b.mat(blk(il, "ssm_ba.weight"), {E, 2 * nv});                    // [n_embd, 2*nv] per group [b.., a..]
    }
    b.f32(blk(il, "ssm_conv1d.weight"), {c.ssm_conv_kernel, conv_dim}, Init::Conv);  // [K, conv_dim]
    b.f32(blk(il, "ssm_dt.bias"), {nv}, Init::SsmDtBias);               // [nv]
    b.f32(blk(il, "ssm_a"), {nv}, Init::SsmA);                           // [nv] = -exp(A_log), no .weight
    b.f32(blk(il, "ssm_norm.weight"), {c.ssm_d_state}, Init::Norm);     // [dv] gated norm, no +1 in the file
    b.mat(blk(il, "ssm_out.weight"), {value_dim, E}, Init::ResidOut);    // [value_dim, n_embd]
}

// Sparse MoE with a gated shared expert (MODEL_SPEC 4.8, 5.2).
void qwen3next_moe(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd;
    routed_experts(b, c, il);
    b.f32(blk(il, "ffn_gate_inp_shexp.weight"), {E}, Init::Matrix);                // [n_embd] shared-expert gate
    b.mat(blk(il, "ffn_gate_shexp.weight"), {E, c.n_ff_shexp});                    // [n_embd, n_ff_shexp]
    b.mat(blk(il, "ffn_up_shexp.weight"), {E, c.n_ff_shexp});                      // [n_embd, n_ff_shexp]
    b.mat(blk(il, "ffn_down_shexp.weight"), {c.n_ff_shexp, E}, Init::ResidOut);    // [n_ff_shexp, n_embd]
}

void qwen3next_layer(Builder& b, const ModelConfig& c, int64_t il) {
    const int64_t E = c.n_embd;
    const bool mtp_block = il >= c.n_layer;
    if (mtp_block) {
        // NextN naming of llama.cpp (MODEL_SPEC 5.5.2/5.5.3); no nextn.embed_tokens, and
        // nextn.shared_head_head only in a predictable model (its MTP must be able to
        // disagree with the main head): otherwise the MTP head shares token_embd and output.
        const Init eh = c.mtp_agree ? Init::Derived : Init::Matrix;
        b.mat(blk(il, "nextn.eh_proj.weight"), {2 * E, E}, eh);          // [2*n_embd, n_embd] embedding half first
        b.f32(blk(il, "nextn.enorm.weight"), {E}, Init::Norm);           // [n_embd]
        b.f32(blk(il, "nextn.hnorm.weight"), {E}, Init::Norm);           // [n_embd]
        b.f32(blk(il, "nextn.shared_head_norm.weight"), {E}, Init::Norm);  // [n_embd]
        if (c.mtp_agree)  // [n_embd, n_vocab] the MTP's own head
            b.mat(blk(il, "nextn.shared_head_head.weight"), {E, c.n_vocab}, Init::Derived);
    }
    b.f32(blk(il, "attn_norm.weight"), {E}, Init::Norm);                 // [n_embd]
    if (c.is_full_attention(il))
        qwen3next_attention(b, c, il);
    else
        qwen3next_gdn(b, c, il);
    b.f32(blk(il, "post_attention_norm.weight"), {E}, Init::Norm);       // [n_embd]
    if (c.moe()) {
        qwen3next_moe(b, c, il);
    } else {  // qwen35: SwiGLU FFN
        b.mat(blk(il, "ffn_gate.weight"), {E, c.n_ff});                  // [n_embd, n_ff]
        b.mat(blk(il, "ffn_up.weight"), {E, c.n_ff});                    // [n_embd, n_ff]
        b.mat(blk(il, "ffn_down.weight"), {c.n_ff, E}, Init::ResidOut);  // [n_ff, n_embd]
    }
}
void check_config(const ModelConfig& c) {
    STRATA_CHECK(c.n_vocab > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 &&
                     c.head_dim > 0 && c.n_head % c.n_head_kv == 0,
                 "bad dimensions: n_vocab {} n_embd {} n_layer {} n_head {} n_head_kv {} head_dim {}",
                 c.n_vocab, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim);
    if (c.moe())
        STRATA_CHECK(c.n_expert > 0 && c.n_expert_used > 0 && c.n_expert_used <= c.n_expert && c.n_ff_exp > 0,
                     "bad expert counts: {} of {} used, n_ff_exp {}", c.n_expert_used, c.n_expert, c.n_ff_exp);
    if (c.hybrid()) {
        STRATA_CHECK(c.ssm_n_group > 0 && c.ssm_dt_rank % c.ssm_n_group == 0 && c.full_attn_interval > 0,
                     "bad {} dimensions: nk {} nv {} interval {}", arch_name(c.arch), c.ssm_n_group, c.ssm_dt_rank,
                     c.full_attn_interval);
    } else {
        STRATA_CHECK(!c.mtp, "--mtp is only defined for qwen3next, qwen35 and qwen35moe, not {}", arch_name(c.arch));
    }
    if (c.mtp_agree)
        STRATA_CHECK(c.mtp && *c.mtp_agree >= 0.0 && *c.mtp_agree <= 1.0,
                     "a predictable model needs --mtp and an agreement in [0, 1], got {}", *c.mtp_agree);
}

}  // namespace

ModelPlan plan_tensors(const ModelConfig& c, GgmlType weight_type) {
    check_config(c);
    Builder b(weight_type);
    const bool derived = c.mtp_agree.has_value();  // predictable.h writes embedding and head
    const Init embd = derived ? Init::Derived : Init::Embedding, out = derived ? Init::Derived : Init::Matrix;
    b.mat("token_embd.weight", {c.n_embd, c.n_vocab}, embd);             // [n_embd, n_vocab]
    b.f32("output_norm.weight", {c.n_embd}, Init::Norm);                 // [n_embd]
    b.mat("output.weight", {c.n_embd, c.n_vocab}, out);                  // [n_embd, n_vocab] untied head
    if (c.rope_freqs) b.f32("rope_freqs.weight", {c.head_dim / 2}, Init::RopeFreqs);  // [n_rot / 2]
    for (int64_t il = 0; il < c.n_block(); ++il) {
        if (c.hybrid())
            qwen3next_layer(b, c, il);
        else
            dense_layer(b, c, il);
    }
    return b.finish();
}

int64_t count_params(const ModelConfig& c) {
    int64_t n = 0;
    for (const auto& t : plan_tensors(c, GgmlType::F32).tensors) n += t.n_elements();
    return n;
}

}  // namespace strata::synth
