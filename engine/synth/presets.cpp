#include "engine/synth/presets.h"

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata::synth {

std::string_view arch_name(Arch a) {
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

std::string_view preset_name(Preset p) {
    switch (p) {
        case Preset::Tiny: return "tiny";
        case Preset::Small: return "small";
        case Preset::B1: return "1b";
        case Preset::A80B: return "80b-a3b";
    }
    return "?";
}

std::string_view gdn_layout_name(GdnLayout l) { return l == GdnLayout::Split ? "split" : "fused"; }

Arch parse_arch(std::string_view s) {
    for (Arch a : {Arch::Llama, Arch::Qwen3, Arch::Qwen3Next, Arch::Qwen3Moe, Arch::Qwen35, Arch::Qwen35Moe})
        if (s == arch_name(a)) return a;
    fail("unknown architecture '{}' (expected llama, qwen3, qwen3next, qwen3moe, qwen35 or qwen35moe)", s);
}

Preset parse_preset(std::string_view s) {
    for (Preset p : {Preset::Tiny, Preset::Small, Preset::B1, Preset::A80B})
        if (s == preset_name(p)) return p;
    fail("unknown preset '{}' (expected tiny, small, 1b or 80b-a3b)", s);
}

GdnLayout parse_gdn_layout(std::string_view s) {
    if (s == "split") return GdnLayout::Split;
    if (s == "fused") return GdnLayout::Fused;
    fail("unknown GDN layout '{}' (expected split or fused)", s);
}

namespace {

// Every matrix row length below is a multiple of 256 so that every block type
// (including the 256-wide K-quant super-blocks) applies to every weight matrix of
// every preset; tiny would otherwise silently fall back to q8_0 for K-quants.

ModelConfig dense(Arch arch, Preset p) {
    ModelConfig c;
    c.arch = arch;
    c.preset = p;
    const bool llama = arch == Arch::Llama;
    c.rope_theta = llama ? 10000.0f : 1000000.0f;
    c.rms_eps = llama ? 1e-5f : 1e-6f;
    switch (p) {
        case Preset::Tiny:
            c.n_vocab = 1024; c.n_ctx = 2048; c.n_embd = 256; c.n_layer = 2; c.n_ff = 768;
            c.n_head = 4; c.n_head_kv = 2;
            // qwen3: head_dim 128 != n_embd / n_head, as in real Qwen3 models, so the
            // key_length path is exercised.
            c.head_dim = llama ? 64 : 128;
            break;
        case Preset::Small:
            c.n_vocab = 32000; c.n_ctx = 4096; c.n_embd = 768; c.n_layer = 8; c.n_ff = 2048;
            c.n_head = llama ? 12 : 8; c.n_head_kv = 4; c.head_dim = llama ? 64 : 128;
            break;
        case Preset::A80B:
            fail("preset 80b-a3b is Qwen3-Next-80B-A3B's shape: it needs --arch qwen3next");
        case Preset::B1:
            // llama: TinyLlama-1.1B's shape. qwen3: a Qwen3-1.7B-like layer, fewer layers.
            c.n_vocab = 32000; c.n_ctx = llama ? 2048 : 4096; c.n_embd = 2048;
            c.n_layer = llama ? 22 : 20; c.n_ff = llama ? 5632 : 6144;
            c.n_head = llama ? 32 : 16; c.n_head_kv = llama ? 4 : 8; c.head_dim = llama ? 64 : 128;
            break;
    }
    c.n_rot = c.head_dim;
    return c;
}

// Qwen3-Next scaled down: GDN:attention 3:1 (interval 4), gated attention with
// partial RoPE (1/4 of head_dim), every layer MoE with a gated shared expert,
// nv = 2 nk value heads as in the 80B model.
ModelConfig qwen3next(Arch arch, Preset p) {
    ModelConfig c;
    c.arch = arch;
    c.preset = p;
    c.rope_theta = 10000000.0f;
    c.rms_eps = 1e-6f;
    c.full_attn_interval = 4;
    c.ssm_conv_kernel = 4;
    switch (p) {
        case Preset::Tiny:
            c.n_vocab = 1024; c.n_ctx = 4096; c.n_embd = 256; c.n_layer = 4; c.n_ff = 640;
            c.n_head = 4; c.n_head_kv = 2; c.head_dim = 64;
            c.n_expert = 4; c.n_expert_used = 2; c.n_ff_exp = 256; c.n_ff_shexp = 256;
            c.ssm_d_state = 64; c.ssm_n_group = 2; c.ssm_dt_rank = 4;
            break;
        case Preset::Small:
            c.n_vocab = 32000; c.n_ctx = 4096; c.n_embd = 512; c.n_layer = 8; c.n_ff = 1280;
            c.n_head = 8; c.n_head_kv = 2; c.head_dim = 128;
            c.n_expert = 16; c.n_expert_used = 4; c.n_ff_exp = 256; c.n_ff_shexp = 256;
            c.ssm_d_state = 128; c.ssm_n_group = 4; c.ssm_dt_rank = 8;
            break;
        case Preset::B1:
            c.n_vocab = 32000; c.n_ctx = 4096; c.n_embd = 1024; c.n_layer = 16; c.n_ff = 2560;
            c.n_head = 8; c.n_head_kv = 2; c.head_dim = 256;
            c.n_expert = 64; c.n_expert_used = 8; c.n_ff_exp = 256; c.n_ff_shexp = 512;
            c.ssm_d_state = 128; c.ssm_n_group = 8; c.ssm_dt_rank = 16;
            break;
        case Preset::A80B:  // MODEL_SPEC 4.1's values
            if (arch != Arch::Qwen3Next) fail("preset 80b-a3b is Qwen3-Next-80B-A3B's shape: it needs --arch qwen3next");
            c.n_vocab = 151936; c.n_ctx = 262144; c.n_embd = 2048; c.n_layer = 48; c.n_ff = 5120;
            c.n_head = 16; c.n_head_kv = 2; c.head_dim = 256;
            c.n_expert = 512; c.n_expert_used = 10; c.n_ff_exp = 512; c.n_ff_shexp = 512;
            c.ssm_d_state = 128; c.ssm_n_group = 16; c.ssm_dt_rank = 32;
            break;
    }
    c.n_rot = c.head_dim / 4;  // partial_rotary_factor 0.25
    if (arch == Arch::Qwen35) {  // Qwen3.5's dense models: a SwiGLU FFN in place of the MoE
        c.n_expert = c.n_expert_used = c.n_ff_exp = c.n_ff_shexp = 0;
        c.n_ff = 3 * c.n_embd;
    }
    return c;
}

// Qwen3-MoE (Qwen3-30B-A3B's layer, scaled down): qwen3's attention with per-head q/k
// norms, every FFN a routed MoE (softmax router, top-k renormalized), no shared expert.
ModelConfig qwen3moe(Preset p) {
    ModelConfig c = dense(Arch::Qwen3Moe, p);
    switch (p) {
        case Preset::Tiny: c.n_expert = 8; c.n_expert_used = 2; c.n_ff_exp = 256; break;
        case Preset::Small: c.n_expert = 32; c.n_expert_used = 4; c.n_ff_exp = 256; break;
        case Preset::B1: c.n_expert = 64; c.n_expert_used = 8; c.n_ff_exp = 768; break;
        case Preset::A80B: break;  // dense() refused it
    }
    c.n_ff = c.n_ff_exp * c.n_expert_used;  // informational, as the converter writes it
    return c;
}

}  // namespace

ModelConfig make_config(Arch arch, Preset preset, int64_t vocab_size) {
    const bool hybrid = arch == Arch::Qwen3Next || arch == Arch::Qwen35 || arch == Arch::Qwen35Moe;
    ModelConfig c = hybrid ? qwen3next(arch, preset) : arch == Arch::Qwen3Moe ? qwen3moe(preset) : dense(arch, preset);
    if (vocab_size > 0) c.n_vocab = vocab_size;
    c.name = fmt::format("strata-synth-{}-{}", arch_name(arch), preset_name(preset));
    return c;
}

}  // namespace strata::synth
