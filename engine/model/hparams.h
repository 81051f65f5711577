// Hyperparameters of a model, read from its GGUF metadata with llama.cpp's keys and
// defaults (MODEL_SPEC.md 3.1 and 5.1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class GgufFile;

enum class Arch { Llama, Qwen3, Qwen3Next, Qwen3Moe, Qwen35, Qwen35Moe };

struct HParams {
    Arch arch = Arch::Llama;
    std::string arch_name;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;        // main stack (qwen3next: without the MTP blocks)
    int64_t n_ff = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;       // key_length
    int64_t head_dim_v = 0;     // value_length
    int64_t n_rot = 0;          // rotary dims per head
    bool rope_neox = false;     // NEOX pairs (qwen3, qwen3next) or adjacent pairs (llama)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    // YaRN (rope.scaling.type yarn; ext_factor 0 = off) and the cos/sin scale.
    float rope_ext_factor = 0.0f, rope_corr_low = 0.0f, rope_corr_high = 0.0f, rope_mscale = 1.0f;
    float rms_eps = 1e-5f;

    // MoE (qwen3next, qwen3moe); n_ff_shexp 0: no shared expert
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
    // hybrid (qwen3next, qwen35, qwen35moe)
    int64_t ssm_conv_kernel = 0, ssm_d_state = 0, ssm_n_group = 0, ssm_dt_rank = 0, ssm_d_inner = 0;
    int64_t n_nextn = 0;                // MTP blocks after the main stack
    std::vector<bool> recurrent;        // per main layer: Gated DeltaNet (true) or attention

    // Gated DeltaNet + gated attention layers (qwen3next and its successors qwen35, qwen35moe).
    bool hybrid() const { return arch == Arch::Qwen3Next || arch == Arch::Qwen35 || arch == Arch::Qwen35Moe; }
    // Routed experts in every layer.
    bool moe() const { return arch == Arch::Qwen3Next || arch == Arch::Qwen3Moe || arch == Arch::Qwen35Moe; }

    int64_t n_q() const { return n_head * head_dim; }
    int64_t n_kv() const { return n_head_kv * head_dim; }
    bool is_recurrent(int64_t il) const { return il < static_cast<int64_t>(recurrent.size()) && recurrent[il]; }

    static HParams from_gguf(const GgufFile& f);
};

const char* arch_name(Arch a);

}  // namespace strata
