#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/synth/model_writer.h"

namespace strata::synth {

std::optional<uint32_t> llama_file_type(GgmlType t) {
    // llama_ftype (include/llama.h). For the K-quants the "_S" (small) variant is the
    // closest: it means "mostly this type", and here every matrix has it.
    switch (t) {
        case GgmlType::F32: return 0;
        case GgmlType::F16: return 1;
        case GgmlType::Q4_0: return 2;
        case GgmlType::Q4_1: return 3;
        case GgmlType::Q8_0: return 7;
        case GgmlType::Q5_0: return 8;
        case GgmlType::Q5_1: return 9;
        case GgmlType::Q2_K: return 10;
        case GgmlType::Q3_K: return 11;
        case GgmlType::Q4_K: return 14;
        case GgmlType::Q5_K: return 16;
        case GgmlType::Q6_K: return 18;
        case GgmlType::IQ2_XXS: return 19;
        case GgmlType::IQ2_XS: return 20;
        case GgmlType::IQ3_XXS: return 23;
        case GgmlType::IQ1_S: return 24;
        case GgmlType::IQ4_NL: return 25;
        case GgmlType::IQ3_S: return 26;
        case GgmlType::IQ2_S: return 28;
        case GgmlType::IQ4_XS: return 30;
        case GgmlType::IQ1_M: return 31;
        case GgmlType::BF16: return 32;
        case GgmlType::TQ1_0: return 36;
        case GgmlType::TQ2_0: return 37;
        case GgmlType::MXFP4: return 38;
        default: return std::nullopt;
    }
}

std::vector<std::pair<std::string, GgufValue>> model_metadata(const ModelConfig& c, GgmlType type,
                                                              bool any_quantized, uint64_t seed) {
    const auto ftype = llama_file_type(type);
    STRATA_CHECK(ftype.has_value(), "type {} is not a weight type", type_info(type).name);
    const std::string A(arch_name(c.arch));
    std::vector<std::pair<std::string, GgufValue>> kv;
    auto u32 = [&](const std::string& key, int64_t v) {
        STRATA_CHECK(v >= 0 && v <= 0xFFFFFFFFll, "{} = {} does not fit a UINT32", key, v);
        kv.emplace_back(key, GgufValue::u32(static_cast<uint32_t>(v)));
    };
    auto f32 = [&](const std::string& key, float v) { kv.emplace_back(key, GgufValue::f32(v)); };

    kv.emplace_back("general.architecture", GgufValue::str(A));
    kv.emplace_back("general.name", GgufValue::str(c.name));
    std::string desc = fmt::format("synthetic random weights from strata make-model (arch {}, preset {}, type {}, "
                                   "seed {}); not a trained model",
                                   A, preset_name(c.preset), type_info(type).name, seed);
    if (c.mtp_agree)
        desc += fmt::format("; predictable (--mtp-agree {}): greedy decoding follows a fixed permutation of the "
                            "ordinary tokens, the MTP head agrees with it on that fraction of them",
                            *c.mtp_agree);
    kv.emplace_back("general.description", GgufValue::str(desc));
    u32("general.file_type", *ftype);
    if (any_quantized) u32("general.quantization_version", 2);

    u32(A + ".context_length", c.n_ctx);
    u32(A + ".embedding_length", c.n_embd);
    u32(A + ".block_count", c.n_block());  // includes the MTP block (MODEL_SPEC 5.5.2)
    u32(A + ".feed_forward_length", c.n_ff);
    u32(A + ".attention.head_count", c.n_head);
    u32(A + ".attention.head_count_kv", c.n_head_kv);
    u32(A + ".attention.key_length", c.head_dim);
    u32(A + ".attention.value_length", c.head_dim);
    f32(A + ".attention.layer_norm_rms_epsilon", c.rms_eps);
    f32(A + ".rope.freq_base", c.rope_theta);
    u32(A + ".rope.dimension_count", c.n_rot);
    if (c.yarn_factor > 0) {  // as llama.cpp's converter writes a YaRN config (Qwen's long-context one)
        kv.emplace_back(A + ".rope.scaling.type", GgufValue::str("yarn"));
        f32(A + ".rope.scaling.factor", static_cast<float>(c.yarn_factor));
        u32(A + ".rope.scaling.original_context_length", 256);
    }
    if (c.arch == Arch::Llama) u32(A + ".vocab_size", c.n_vocab);
    if (c.moe()) {
        u32(A + ".expert_count", c.n_expert);
        u32(A + ".expert_used_count", c.n_expert_used);
        u32(A + ".expert_feed_forward_length", c.n_ff_exp);
    }
    if (c.arch == Arch::Qwen3Next || c.arch == Arch::Qwen35Moe) u32(A + ".expert_shared_feed_forward_length", c.n_ff_shexp);
    if (c.qwen35()) {
        // IMROPE sections over the n_rot / 2 rotated pairs, as Qwen3.5's [11, 11, 10, 0]
        // for 32 pairs: every pair in a t/h/w section (docs/qwen35.md 2.6).
        const int32_t n = static_cast<int32_t>(c.n_rot / 2);
        kv.emplace_back(A + ".rope.dimension_sections", GgufValue::i32_array({(n + 2) / 3, (n + 1) / 3, n / 3, 0}));
    }
    if (c.hybrid()) {
        u32(A + ".ssm.conv_kernel", c.ssm_conv_kernel);
        u32(A + ".ssm.state_size", c.ssm_d_state);
        u32(A + ".ssm.group_count", c.ssm_n_group);
        u32(A + ".ssm.time_step_rank", c.ssm_dt_rank);
        u32(A + ".ssm.inner_size", c.ssm_d_inner());
        u32(A + ".full_attention_interval", c.full_attn_interval);
        if (c.mtp) u32(A + ".nextn_predict_layers", 1);
    }
    return kv;
}

}  // namespace strata::synth
