// strata make-model: write a synthetic GGUF (random weights, real metadata, tensor
// names and tokenizer) for tests and benchmarks. The work is in engine/synth/.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "engine/core/flags.h"
#include "engine/synth/model_writer.h"
#include "engine/synth/options.h"
#include "tools/commands.h"

namespace strata {

int cmd_make_model(int argc, char** argv) {
    Flags flags = synth::make_model_flags();
    flags.parse(argc, argv);
    if (flags.help()) {
        fmt::print("{}\nweight types: {}\n", flags.help_text(), synth::weight_type_names());
        return 0;
    }
    const synth::SynthOptions o = synth::options_from_flags(flags);
    const std::string out = flags.str("--out");

    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    synth::SynthModel m = synth::build_model(o);
    for (const auto& note : m.notes) fmt::print(stderr, "note: {}\n", note);
    const int64_t n_params = m.n_params, n_learned = m.n_learned_tokens;
    const size_t n_tensors = m.tensors.size();
    const synth::ModelConfig cfg = m.config;
    const auto t1 = clock::now();
    const std::string mtp_out = flags.str("--mtp-out");
    if (mtp_out.empty()) {
        synth::make_writer(std::move(m)).write(out);
    } else {
        const auto [main, side] = synth::make_writers_mtp_apart(std::move(m));
        main.write(out);
        side.write(mtp_out);
    }
    const auto t2 = clock::now();

    std::FILE* f = std::fopen(out.c_str(), "rb");
    long size = -1;
    if (f) {
        std::fseek(f, 0, SEEK_END);
        size = std::ftell(f);
        std::fclose(f);
    }
    const double gen_s = std::chrono::duration<double>(t1 - t0).count();
    const double write_s = std::chrono::duration<double>(t2 - t1).count();
    const std::string mtp = !cfg.mtp         ? ""
                            : cfg.mtp_agree ? fmt::format(" +mtp (predictable, agreement {})", *cfg.mtp_agree)
                                            : " +mtp";
    fmt::print("wrote {}: {} {} {}{}, {} params ({:.2f} M), {} tensors, vocab {} ({} learned), {:.1f} MiB; "
               "generate {:.2f} s, write {:.2f} s\n",
               out, synth::arch_name(cfg.arch), synth::preset_name(cfg.preset), type_info(o.type).name,
               mtp, n_params, static_cast<double>(n_params) / 1e6, n_tensors, cfg.n_vocab,
               n_learned, static_cast<double>(size) / (1024.0 * 1024.0), gen_s, write_s);
    if (!mtp_out.empty()) fmt::print("wrote {}: the MTP block, apart\n", mtp_out);
    return 0;
}

}  // namespace strata
