// Dense llama / qwen3 forward: agrees with the float64 reference on tiny synthetic
// models, and gives bit-identical logits whatever the window size or thread count.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/gguf/reader.h"
#include "engine/model/model.h"
#include "engine/model/reference.h"
#include "engine/synth/model_writer.h"

using namespace strata;

namespace {

GgufFile tiny(synth::Arch arch, GgmlType type, uint64_t seed = 7) {
    synth::SynthOptions o;
    o.arch = arch;
    o.preset = synth::Preset::Tiny;
    o.type = type;
    o.seed = seed;
    const auto bytes = synth::make_writer(synth::build_model(o)).to_bytes();
    return GgufFile::from_bytes(bytes.data(), bytes.size(), "tiny.gguf");
}

std::vector<float> eval_all(const Model& m, int threads, const std::vector<int32_t>& toks, int window) {
    ThreadPool pool(threads);
    ForwardCtx ctx{pool, {}};
    SeqState s = m.new_state(64, GgmlType::F16);
    const int64_t V = m.hp().n_vocab;
    std::vector<float> out(toks.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < toks.size(); i += static_cast<size_t>(window)) {
        const size_t n = std::min(toks.size() - i, static_cast<size_t>(window));
        m.eval(ctx, s, std::span<const int32_t>(toks.data() + i, n), out.data() + i * static_cast<size_t>(V), true);
    }
    return out;
}

}  // namespace

TEST_CASE("dense forward matches the float64 reference", "[model][reference]") {
    const std::vector<int32_t> toks = {1, 17, 42, 5, 99, 3, 250, 7};
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3}) {
        for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
            GgufFile f = tiny(arch, type);
            const auto ref = reference_forward(f, toks);
            auto m = Model::load(std::move(f));
            const auto got = eval_all(*m, 2, toks, 3);
            const int64_t V = m->hp().n_vocab;
            double max_err = 0, max_ref = 0;
            for (size_t t = 0; t < toks.size(); ++t)
                for (int64_t v = 0; v < V; ++v) {
                    max_err = std::max(max_err, std::fabs(got[t * V + v] - ref[t][v]));
                    max_ref = std::max(max_ref, std::fabs(ref[t][v]));
                }
            INFO(synth::arch_name(arch) << " " << type_info(type).name << ": max |err| " << max_err
                                        << " of max |logit| " << max_ref);
            // f32 weights: only f32 rounding and the f16 KV cache separate the two.
            CHECK(max_err < 3e-3 * std::max(1.0, max_ref));
            CHECK(max_ref > 0.1);  // the model computes something
        }
    }
}

TEST_CASE("dense forward is batch- and thread-count-invariant", "[model][determinism]") {
    const std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3}) {
        auto m = Model::load(tiny(arch, GgmlType::Q4_K));
        const auto whole = eval_all(*m, 1, toks, 64);
        CHECK(eval_all(*m, 1, toks, 1) == whole);
        CHECK(eval_all(*m, 2, toks, 4) == whole);
        CHECK(eval_all(*m, 3, toks, 5) == whole);
    }
}

TEST_CASE("dense forward refuses bad input clearly", "[model]") {
    auto m = Model::load(tiny(synth::Arch::Llama, GgmlType::F32));
    ThreadPool pool(1);
    ForwardCtx ctx{pool, {}};
    SeqState s = m->new_state(4, GgmlType::F16);
    std::vector<float> logits(static_cast<size_t>(m->hp().n_vocab) * 8);
    const std::vector<int32_t> bad = {1, static_cast<int32_t>(m->hp().n_vocab)};
    CHECK_THROWS_WITH(m->eval(ctx, s, bad, logits.data(), false), Catch::Contains("out of range"));
    const std::vector<int32_t> longp = {1, 2, 3, 4, 5};
    SeqState s2 = m->new_state(4, GgmlType::F16);
    CHECK_THROWS_WITH(m->eval(ctx, s2, longp, logits.data(), false), Catch::Contains("context holds 4"));
}
