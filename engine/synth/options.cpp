#include "engine/synth/options.h"

#include <fmt/format.h>

#include "engine/synth/vocab.h"

namespace strata::synth {

Flags make_model_flags() {
    return Flags("make-model",
                 "strata make-model --arch llama|qwen3|qwen3next|qwen3moe|qwen35|qwen35moe --out FILE [--preset tiny|small|1b|80b-a3b] "
                 "[--type TYPE] [--seed N] [--mtp] [--mtp-agree A] [--mtp-out FILE] [--rope-freqs] [--yarn FACTOR] [--gdn-layout split|fused] [--vocab-size N] [--layers N]",
                 {
                     {"--arch", "NAME", "", "architecture: llama, qwen3, qwen3next, qwen3moe, qwen35 or qwen35moe (required)"},
                     {"--preset", "NAME", "tiny",
                      "size: tiny (2-7M params), small (~100M), 1b (~1.0-1.1B) or 80b-a3b (qwen3next: Qwen3-Next-80B-A3B's "
                      "shapes, 48 layers of ~0.9 GB at q4_K; see --layers)"},
                     {"--type", "TYPE", "f16", "type of the weight matrices (f32, f16, bf16, q8_0, q4_K, ...)"},
                     {"--seed", "N", "0", "random seed; the same seed gives the same bytes"},
                     {"--out", "FILE", "", "output GGUF file (required)"},
                     {"--mtp", "", "", "qwen3next, qwen35, qwen35moe: add one MTP (nextn) block after the main layers"},
                     {"--mtp-out", "FILE", "",
                      "with --mtp: write the MTP block to FILE (an MTP-only file, as llama.cpp's converter writes with "
                      "--mtp) and --out without it (as with --no-mtp); load them with --mtp-model"},
                     {"--rope-freqs", "", "", "add a rope_freqs.weight tensor (llama 3.1+ rope scaling factors)"},
                     {"--yarn", "FACTOR", "", "YaRN rope scaling by FACTOR over an original context of 256 (Qwen's long-context config)"},
                     {"--mtp-agree", "A", "",
                      "qwen3next, qwen35, qwen35moe (implies --mtp): predictable model; greedy decoding follows a fixed token "
                      "permutation and the MTP agrees with it on a fraction A in [0, 1] of the tokens"},
                     {"--gdn-layout", "NAME", "split",
                      "qwen3next GDN projection: split (attn_qkv + attn_gate) or fused (legacy ssm_in)"},
                     {"--vocab-size", "N", "", "vocabulary rows (default 1024 for tiny, 32000 otherwise)"},
                     {"--layers", "N", "", "main layers (default: the preset's); each layer keeps the preset's shape"},
                     {"--threads", "N", "2", "generation threads (the output does not depend on it)"},
                 });
}

std::string weight_type_names() {
    std::string s;
    for (GgmlType t : supported_types()) {
        if (!llama_file_type(t)) continue;
        if (!s.empty()) s += ", ";
        s += type_info(t).name;
    }
    return s;
}

SynthOptions options_from_flags(const Flags& f) {
    if (!f.positional().empty())
        throw UsageError(fmt::format("make-model: unexpected argument '{}'", f.positional().front()));
    if (!f.given("--arch")) throw UsageError("make-model: --arch is required");
    if (!f.given("--out") || f.str("--out").empty()) throw UsageError("make-model: --out FILE is required");

    SynthOptions o;
    try {
        o.arch = parse_arch(f.str("--arch"));
        o.preset = parse_preset(f.str("--preset"));
        o.gdn_layout = parse_gdn_layout(f.str("--gdn-layout"));
    } catch (const UsageError&) {
        throw;
    } catch (const Error& e) {
        throw UsageError(fmt::format("make-model: {}", e.what()));
    }

    const std::string tname = f.str("--type");
    const auto t = type_from_name(tname);
    if (!t || !type_info(*t).supported || !llama_file_type(*t))
        throw UsageError(fmt::format("make-model: --type '{}' is not a supported weight type (one of: {})", tname,
                                     weight_type_names()));
    o.type = *t;

    const int64_t seed = f.integer("--seed");
    if (seed < 0) throw UsageError(fmt::format("make-model: --seed must be >= 0, got {}", seed));
    o.seed = static_cast<uint64_t>(seed);

    if (f.given("--vocab-size")) {
        const int64_t v = f.integer("--vocab-size");
        const int64_t lo = 256 + n_added_tokens(), hi = int64_t{1} << 22;
        if (v < lo || v > hi)
            throw UsageError(fmt::format("make-model: --vocab-size must be in [{}, {}], got {}", lo, hi, v));
        o.vocab_size = v;
    }
    if (f.given("--layers")) {
        const int64_t n = f.integer("--layers");
        if (n < 1 || n > 1024) throw UsageError(fmt::format("make-model: --layers must be in [1, 1024], got {}", n));
        o.layers = n;
    }
    const int64_t threads = f.integer("--threads");
    if (threads < 1 || threads > 256)
        throw UsageError(fmt::format("make-model: --threads must be in [1, 256], got {}", threads));
    o.threads = static_cast<int>(threads);

    o.mtp = f.on("--mtp");
    o.rope_freqs = f.on("--rope-freqs");
    if (f.given("--yarn")) {
        const double y = f.number("--yarn");
        if (!(y >= 1.0 && y <= 1024.0))
            throw UsageError(fmt::format("make-model: --yarn must be in [1, 1024], got {}", f.str("--yarn")));
        o.yarn_factor = y;
    }
    const bool hybrid = o.arch == Arch::Qwen3Next || o.arch == Arch::Qwen35 || o.arch == Arch::Qwen35Moe;
    if (!hybrid && o.mtp) throw UsageError("make-model: --mtp needs --arch qwen3next, qwen35 or qwen35moe");
    if (f.given("--mtp-agree")) {
        if (!hybrid) throw UsageError("make-model: --mtp-agree needs --arch qwen3next, qwen35 or qwen35moe");
        const double a = f.number("--mtp-agree");
        if (!(a >= 0.0 && a <= 1.0))  // also refuses NaN
            throw UsageError(fmt::format("make-model: --mtp-agree must be in [0, 1], got {}", f.str("--mtp-agree")));
        o.mtp_agree = a;
        o.mtp = true;  // the agreement is the MTP head's
    }
    if (f.given("--mtp-out") && (!o.mtp || f.str("--mtp-out").empty()))
        throw UsageError("make-model: --mtp-out FILE needs --mtp (or --mtp-agree)");
    if (o.arch != Arch::Qwen3Next && f.given("--gdn-layout"))
        throw UsageError("make-model: --gdn-layout needs --arch qwen3next");
    return o;
}

}  // namespace strata::synth
