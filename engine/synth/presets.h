// Hyperparameters of the synthetic models `strata make-model` writes: one
// ModelConfig per (architecture, preset). The values are plain data so tests can
// tweak a preset (e.g. an odd row length to force a quantization fallback).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::synth {

enum class Arch { Llama, Qwen3, Qwen3Next, Qwen3Moe, Qwen35, Qwen35Moe };
// A80B: Qwen3-Next-80B-A3B's own shapes (qwen3next only; 48 layers, ~45 GB at q4_K: write
// fewer with make-model --layers for a file of its per-layer shape and size).
enum class Preset { Tiny, Small, B1, A80B };
// Qwen3-Next Gated DeltaNet input projection as stored in the GGUF (MODEL_SPEC 4.4.2):
// Split = current converter (attn_qkv + attn_gate, de-interleaved);
// Fused = legacy converter (one ssm_in tensor in the HF per-group interleaved layout).
enum class GdnLayout { Split, Fused };

std::string_view arch_name(Arch a);        // "llama", "qwen3", "qwen3next", "qwen3moe", "qwen35", "qwen35moe"
std::string_view preset_name(Preset p);    // "tiny", "small", "1b", "80b-a3b"
std::string_view gdn_layout_name(GdnLayout l);  // "split", "fused"
Arch parse_arch(std::string_view s);       // throws strata::Error
Preset parse_preset(std::string_view s);
GdnLayout parse_gdn_layout(std::string_view s);

struct ModelConfig {
    Arch arch = Arch::Llama;
    Preset preset = Preset::Tiny;
    std::string name;            // general.name

    int64_t n_vocab = 0;         // rows of token_embd / output
    int64_t n_ctx = 0;           // {arch}.context_length
    int64_t n_embd = 0;
    int64_t n_layer = 0;         // main layers (without the MTP block)
    int64_t n_ff = 0;            // dense FFN; qwen3next: informational only
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;        // key_length = value_length
    int64_t n_rot = 0;           // rope.dimension_count
    float rope_theta = 10000.0f;
    float rms_eps = 1e-5f;

    // MoE archs (experts; qwen3moe has no shared expert), hybrid archs (the rest)
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;        // per routed expert
    int64_t n_ff_shexp = 0;      // shared expert
    int64_t ssm_conv_kernel = 0; // K
    int64_t ssm_d_state = 0;     // dk (= dv: llama.cpp sizes both with state_size)
    int64_t ssm_n_group = 0;     // nk, key heads
    int64_t ssm_dt_rank = 0;     // nv, value heads
    int64_t full_attn_interval = 0;
    bool mtp = false;            // one nextn block after the main stack
    bool rope_freqs = false;     // a rope_freqs.weight tensor (llama 3.1+ files: per-pair angle divisors)
    double yarn_factor = 0;      // > 0: rope.scaling.type yarn with this factor over an original context of 256
    // --mtp-agree: a "predictable" model (engine/synth/predictable.h) whose greedy next
    // token is a fixed permutation of the current one and whose MTP head agrees with it
    // on this fraction of the tokens. Needs mtp; adds nextn.shared_head_head.
    std::optional<double> mtp_agree;
    GdnLayout gdn_layout = GdnLayout::Split;

    int64_t ssm_d_inner() const { return ssm_d_state * ssm_dt_rank; }  // value_dim
    int64_t ssm_key_dim() const { return ssm_d_state * ssm_n_group; }
    int64_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_d_inner(); }
    int64_t n_block() const { return n_layer + (mtp ? 1 : 0); }  // {arch}.block_count
    bool moe() const { return arch == Arch::Qwen3Next || arch == Arch::Qwen3Moe || arch == Arch::Qwen35Moe; }  // routed experts in every layer
    // Gated DeltaNet + gated attention (qwen3next; qwen35 and qwen35moe, whose GDN has
    // separate ssm_beta / ssm_alpha and tiled value heads: docs/qwen35.md).
    bool hybrid() const { return arch == Arch::Qwen3Next || arch == Arch::Qwen35 || arch == Arch::Qwen35Moe; }
    bool qwen35() const { return arch == Arch::Qwen35 || arch == Arch::Qwen35Moe; }
    // Layer i of the main stack is full attention (qwen3next: else Gated DeltaNet).
    bool is_full_attention(int64_t il) const {
        return !hybrid() || il >= n_layer || (il + 1) % full_attn_interval == 0;
    }
};

// The preset's hyperparameters. vocab_size 0 keeps the preset's default.
ModelConfig make_config(Arch arch, Preset preset, int64_t vocab_size = 0);

}  // namespace strata::synth
