// Helpers shared by the model tests: tiny synthetic models built in memory, logits
// of a token sequence fed in windows (a model, or any runner), and the error against
// the float64 reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "engine/backend/cpu_ops.h"
#include "engine/gguf/reader.h"
#include "engine/model/model.h"
#include "engine/run/runner.h"
#include "engine/synth/model_writer.h"

namespace strata::test {

inline GgufFile to_file(synth::SynthModel&& m, const char* name = "tiny.gguf") {
    const auto bytes = synth::make_writer(std::move(m)).to_bytes();
    return GgufFile::from_bytes(bytes.data(), bytes.size(), name);
}

inline synth::SynthModel tiny_model(synth::Arch arch, GgmlType type, uint64_t seed,
                                    synth::GdnLayout layout = synth::GdnLayout::Split, bool mtp = false) {
    synth::SynthOptions o;
    o.arch = arch;
    o.preset = synth::Preset::Tiny;
    o.type = type;
    o.seed = seed;
    o.mtp = mtp;
    o.gdn_layout = layout;
    return synth::build_model(o);
}

// Logits [T, n_vocab] of toks fed in windows of `window` tokens on `threads` threads.
inline std::vector<float> eval_all(const Model& m, int threads, const std::vector<int32_t>& toks, int window) {
    ThreadPool pool(threads);
    CpuOps cpu_ops(pool);
    ForwardCtx ctx(cpu_ops, m);
    SeqState s = m.new_state(ctx.ops, 64, GgmlType::F16);
    const int64_t V = m.hp().n_vocab;
    std::vector<float> out(toks.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < toks.size(); i += static_cast<size_t>(window)) {
        const size_t n = std::min(toks.size() - i, static_cast<size_t>(window));
        m.eval(ctx, s, std::span<const int32_t>(toks.data() + i, n), out.data() + i * static_cast<size_t>(V), true);
    }
    return out;
}

// Logits of a prompt (every position) and of n_decode steps after it (tokens 40, 41...),
// through any runner, on sequence seq.
inline std::vector<float> run_windows_on(Runner& r, int seq, const std::vector<int32_t>& prompt, int n_decode = 3) {
    const int64_t V = r.model().hp().n_vocab;
    std::vector<float> out((prompt.size() + static_cast<size_t>(n_decode)) * static_cast<size_t>(V));
    const Runner::Item p{seq, prompt, true};
    r.eval(std::span<const Runner::Item>(&p, 1), out.data());
    for (int i = 0; i < n_decode; ++i) {
        const int32_t tok[1] = {40 + i};
        const Runner::Item d{seq, std::span<const int32_t>(tok, 1), false};
        r.eval(std::span<const Runner::Item>(&d, 1), out.data() + (prompt.size() + i) * static_cast<size_t>(V));
    }
    return out;
}

// The same on a sequence of its own.
inline std::vector<float> run_windows(Runner& r, const std::vector<int32_t>& prompt = {5, 9, 2, 77, 31, 8},
                                      int n_decode = 3) {
    const int seq = r.new_sequence();
    std::vector<float> out = run_windows_on(r, seq, prompt, n_decode);
    r.free_sequence(seq);
    return out;
}

struct Err {
    double max_err = 0, max_ref = 0;
    double rel() const { return max_err / std::max(1.0, max_ref); }
};

inline Err compare(const std::vector<float>& got, const std::vector<std::vector<double>>& ref) {
    Err e;
    const size_t V = ref.at(0).size();
    for (size_t t = 0; t < ref.size(); ++t)
        for (size_t v = 0; v < V; ++v) {
            e.max_err = std::max(e.max_err, std::fabs(got[t * V + v] - ref[t][v]));
            e.max_ref = std::max(e.max_ref, std::fabs(ref[t][v]));
        }
    return e;
}

}  // namespace strata::test
