// Dense llama / qwen3 forward: agrees with the float64 reference on tiny synthetic
// models, and gives bit-identical logits whatever the window size or thread count.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/backend/cpu_ops.h"
#include "engine/gguf/reader.h"
#include "engine/model/model.h"
#include "engine/model/reference.h"
#include "engine/quant/quant.h"
#include "engine/synth/model_writer.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

using test::compare;
using test::eval_all;

GgufFile tiny(synth::Arch arch, GgmlType type, uint64_t seed = 7) {
    return test::to_file(test::tiny_model(arch, type, seed));
}

}  // namespace

TEST_CASE("dense forward matches the float64 reference", "[model][reference]") {
    const std::vector<int32_t> toks = {1, 17, 42, 5, 99, 3, 250, 7};
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3}) {
        for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
            GgufFile f = tiny(arch, type);
            const auto ref = reference_forward(f, toks);
            auto m = Model::load(std::move(f));
            const auto e = compare(eval_all(*m, 2, toks, 3), ref);
            INFO(synth::arch_name(arch) << " " << type_info(type).name << ": max |err| " << e.max_err
                                        << " of max |logit| " << e.max_ref);
            // Only f32 rounding and the f16 KV cache separate the two.
            CHECK(e.rel() < 3e-3);
            CHECK(e.max_ref > 0.1);  // the model computes something
        }
    }
}

TEST_CASE("dense forward matches the reference for every weight type", "[model][reference]") {
    // The reference dequantizes the same blocks, so every type gets the same bound:
    // what is left is f32 rounding and the f16 KV cache.
    const std::vector<int32_t> toks = {1, 17, 42, 5, 99};
    for (GgmlType type : supported_types()) {
        if (type == GgmlType::Q8_K) continue;  // activation-only format
        GgufFile f = tiny(synth::Arch::Llama, type, 3);
        const auto ref = reference_forward(f, toks);
        auto m = Model::load(std::move(f));
        const auto e = compare(eval_all(*m, 2, toks, 2), ref);
        INFO(type_info(type).name << ": max |err| " << e.max_err << " of max |logit| " << e.max_ref);
        CHECK(e.rel() < 3e-3);
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
    CpuOps cpu_ops(pool);
    ForwardCtx ctx{cpu_ops, {}};
    SeqState s = m->new_state(4, GgmlType::F16);
    std::vector<float> logits(static_cast<size_t>(m->hp().n_vocab) * 8);
    const std::vector<int32_t> bad = {1, static_cast<int32_t>(m->hp().n_vocab)};
    CHECK_THROWS_WITH(m->eval(ctx, s, bad, logits.data(), false), Catch::Contains("out of range"));
    const std::vector<int32_t> longp = {1, 2, 3, 4, 5};
    SeqState s2 = m->new_state(4, GgmlType::F16);
    CHECK_THROWS_WITH(m->eval(ctx, s2, longp, logits.data(), false), Catch::Contains("context holds 4"));
}
