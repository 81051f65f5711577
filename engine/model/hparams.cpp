#include "engine/model/hparams.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"

namespace strata {

const char* arch_name(Arch a) {
    switch (a) {
        case Arch::Llama: return "llama";
        case Arch::Qwen3: return "qwen3";
        case Arch::Qwen3Next: return "qwen3next";
        case Arch::Qwen3Moe: return "qwen3moe";
        case Arch::Qwen35: return "qwen35";
        case Arch::Qwen35Moe: return "qwen35moe";
    }
    return "?";
}

namespace {

// qwen35 rotates with IMROPE over rope.dimension_sections (docs/qwen35.md 2.6): pair k
// takes the position component of its sector k mod (s0+s1+s2+s3) (t, h, w interleaved,
// then e). For text the t, h and w positions are the token's and e is 0, so the rotation
// is plain NEOX over n_rot dims exactly when no rotated pair falls to e; a file where one
// would is refused rather than computed with the wrong angles.
void check_rope_sections(const GgufFile& f, const std::string& A, const HParams& h) {
    const std::string key = A + "rope.dimension_sections";
    if (!f.has(key)) fail("{}: {} is missing (qwen35 files carry the IMROPE sections)", f.path(), key);
    const auto& v = f.get(key).as_array();
    if (v.size() != 4) fail("{}: {} has {} entries, expected 4", f.path(), key, v.size());
    int64_t s[4], total = 0;
    for (size_t i = 0; i < 4; ++i) {
        s[i] = v[i].as_int();
        if (s[i] < 0) fail("{}: {}[{}] = {} is negative", f.path(), key, i, s[i]);
        total += s[i];
    }
    if (total <= 0) fail("{}: {} sums to 0", f.path(), key);
    for (int64_t k = 0; k < h.n_rot / 2; ++k) {
        const int64_t sector = k % total;
        const bool thw = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                         (sector % 3 == 2 && sector < 3 * s[2]);
        if (!thw)
            fail("{}: {} = [{}, {}, {}, {}] leaves rotated pair {} of {} to the extra component: text rotation "
                 "would not be plain NEOX, which Strata computes",
                 f.path(), key, s[0], s[1], s[2], s[3], k, h.n_rot / 2);
    }
}

}  // namespace

HParams HParams::from_gguf(const GgufFile& f) {
    HParams h;
    h.arch_name = f.get_string("general.architecture");
    if (h.arch_name == "llama") h.arch = Arch::Llama;
    else if (h.arch_name == "qwen3") h.arch = Arch::Qwen3;
    else if (h.arch_name == "qwen3next") h.arch = Arch::Qwen3Next;
    else if (h.arch_name == "qwen3moe") h.arch = Arch::Qwen3Moe;
    else if (h.arch_name == "qwen35") h.arch = Arch::Qwen35;
    else if (h.arch_name == "qwen35moe") h.arch = Arch::Qwen35Moe;
    else fail("{}: unsupported architecture '{}' (supported: llama, qwen3, qwen3moe, qwen3next, qwen35, qwen35moe)",
              f.path(), h.arch_name);
    const std::string A = h.arch_name + ".";

    auto positive = [&](const std::string& key, int64_t v) {
        if (v <= 0 || v > (int64_t{1} << 32)) fail("{}: {} = {} is out of range", f.path(), key, v);
        return v;
    };
    h.n_ctx_train = positive(A + "context_length", f.get_int(A + "context_length"));
    h.n_embd = positive(A + "embedding_length", f.get_int(A + "embedding_length"));
    int64_t n_block = positive(A + "block_count", f.get_int(A + "block_count"));
    h.n_ff = f.get_int(A + "feed_forward_length", 0);
    h.n_head = positive(A + "attention.head_count", f.get_int(A + "attention.head_count"));
    h.n_head_kv = positive(A + "attention.head_count_kv", f.get_int(A + "attention.head_count_kv", h.n_head));
    h.head_dim = positive(A + "attention.key_length", f.get_int(A + "attention.key_length", h.n_embd / h.n_head));
    h.head_dim_v = positive(A + "attention.value_length", f.get_int(A + "attention.value_length", h.head_dim));
    h.n_rot = f.get_int(A + "rope.dimension_count", h.head_dim);
    h.rope_freq_base = static_cast<float>(f.get_float(A + "rope.freq_base", 10000.0));
    const double factor = f.get_float(A + "rope.scaling.factor", f.get_float(A + "rope.scale_linear", 0.0));
    h.rope_freq_scale = factor > 0 ? static_cast<float>(1.0 / factor) : 1.0f;
    const std::string scaling = f.get_string(A + "rope.scaling.type", "linear");
    if (scaling != "linear" && scaling != "none" && scaling != "yarn")
        fail("{}: rope scaling '{}' is not supported yet (linear, yarn and none are)", f.path(), scaling);
    const float attn_factor = static_cast<float>(f.get_float(A + "rope.scaling.yarn_attn_factor", 1.0));
    h.rope_mscale = attn_factor;
    if (scaling == "yarn") {
        // The keys llama.cpp reads, with its defaults: the ramp between the correction
        // dims of beta_fast and beta_slow rotations over the original context, and the
        // magnitude scale 1 + 0.1 ln(factor).
        if (f.get_float(A + "rope.scaling.yarn_log_multiplier", 0.0) != 0.0)
            fail("{}: rope.scaling.yarn_log_multiplier (DeepSeek's YaRN magnitude) is not supported", f.path());
        h.rope_ext_factor = static_cast<float>(f.get_float(A + "rope.scaling.yarn_ext_factor", 1.0));
        const double beta_fast = f.get_float(A + "rope.scaling.yarn_beta_fast", 32.0);
        const double beta_slow = f.get_float(A + "rope.scaling.yarn_beta_slow", 1.0);
        const double n_orig = static_cast<double>(f.get_int(A + "rope.scaling.original_context_length", h.n_ctx_train));
        const double n_dims = static_cast<double>(f.get_int(A + "rope.dimension_count", h.head_dim));
        const auto corr_dim = [&](double n_rot) {
            return n_dims * std::log(n_orig / (n_rot * 2.0 * 3.14159265358979323846)) / (2.0 * std::log(h.rope_freq_base));
        };
        h.rope_corr_low = static_cast<float>(std::max(0.0, std::floor(corr_dim(beta_fast))));
        h.rope_corr_high = static_cast<float>(std::min(n_dims - 1.0, std::ceil(corr_dim(beta_slow))));
        if (h.rope_ext_factor != 0.0f) h.rope_mscale *= 1.0f + 0.1f * std::log(1.0f / h.rope_freq_scale);
    }
    h.rms_eps = static_cast<float>(f.get_float(A + "attention.layer_norm_rms_epsilon"));
    h.rope_neox = h.arch != Arch::Llama;

    if (h.n_head % h.n_head_kv != 0)
        fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), h.n_head, h.n_head_kv);
    if (h.n_rot <= 0 || h.n_rot > h.head_dim || h.n_rot % 2 != 0)
        fail("{}: rope.dimension_count {} must be even and in 1..{}", f.path(), h.n_rot, h.head_dim);

    if (h.moe()) {
        h.n_expert = positive(A + "expert_count", f.get_int(A + "expert_count"));
        h.n_expert_used = positive(A + "expert_used_count", f.get_int(A + "expert_used_count"));
        if (h.n_expert_used > h.n_expert) fail("{}: expert_used_count {} > expert_count {}", f.path(), h.n_expert_used, h.n_expert);
        h.n_ff_exp = positive(A + "expert_feed_forward_length", f.get_int(A + "expert_feed_forward_length", h.n_ff / h.n_expert_used));
    }
    if (h.arch == Arch::Qwen3Next || h.arch == Arch::Qwen35Moe)  // the shared expert
        h.n_ff_shexp = positive(A + "expert_shared_feed_forward_length", f.get_int(A + "expert_shared_feed_forward_length", h.n_ff));
    if (h.arch == Arch::Qwen35) h.n_ff = positive(A + "feed_forward_length", h.n_ff);
    if (h.arch == Arch::Qwen35 || h.arch == Arch::Qwen35Moe) check_rope_sections(f, A, h);
    if (h.hybrid()) {
        h.ssm_conv_kernel = positive(A + "ssm.conv_kernel", f.get_int(A + "ssm.conv_kernel"));
        h.ssm_d_state = positive(A + "ssm.state_size", f.get_int(A + "ssm.state_size"));
        h.ssm_n_group = positive(A + "ssm.group_count", f.get_int(A + "ssm.group_count"));
        h.ssm_dt_rank = positive(A + "ssm.time_step_rank", f.get_int(A + "ssm.time_step_rank"));
        h.ssm_d_inner = positive(A + "ssm.inner_size", f.get_int(A + "ssm.inner_size"));
        if (h.ssm_dt_rank % h.ssm_n_group != 0)
            fail("{}: ssm.time_step_rank {} is not a multiple of ssm.group_count {}", f.path(), h.ssm_dt_rank, h.ssm_n_group);
        h.n_nextn = f.get_int(A + "nextn_predict_layers", 0);
        if (h.n_nextn < 0 || h.n_nextn >= n_block) fail("{}: nextn_predict_layers {} out of range", f.path(), h.n_nextn);
        h.n_layer = n_block - h.n_nextn;
        const int64_t interval = positive(A + "full_attention_interval", f.get_int(A + "full_attention_interval", 4));
        h.recurrent.resize(static_cast<size_t>(h.n_layer));
        for (int64_t i = 0; i < h.n_layer; ++i) h.recurrent[i] = (i + 1) % interval != 0;
        if (f.has(A + "attention.recurrent_layers")) {
            const auto& v = f.get(A + "attention.recurrent_layers").as_array();
            if (static_cast<int64_t>(v.size()) < h.n_layer) fail("{}: attention.recurrent_layers has {} entries for {} layers", f.path(), v.size(), h.n_layer);
            for (int64_t i = 0; i < h.n_layer; ++i)
                h.recurrent[i] = v[i].type() == GgufType::BOOL ? v[i].as_bool() : v[i].as_int() != 0;
        }
    } else {
        h.n_layer = n_block;
    }

    if (f.has(A + "vocab_size")) h.n_vocab = f.get_int(A + "vocab_size");
    else if (f.has("tokenizer.ggml.tokens")) h.n_vocab = static_cast<int64_t>(f.get("tokenizer.ggml.tokens").as_array().size());
    else h.n_vocab = f.tensor("token_embd.weight").ne[1];
    return h;
}

}  // namespace strata
