// Qwen3.5 / 3.6 (qwen35 dense, qwen35moe) on tiny synthetic models: agreement with the
// float64 reference (main stack and MTP block), the tiled value-head order mattering,
// bit-identical logits whatever the window size, and clear errors for malformed files.
#include <catch2/catch.hpp>

#include <random>

#include "engine/backend/cpu_ops.h"
#include "engine/gguf/reader.h"
#include "engine/model/model.h"
#include "engine/model/reference.h"
#include "engine/synth/model_writer.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

using test::compare;
using test::Err;
using test::eval_all;

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 99, 3, 250, 7, 1000, 64, 2};

synth::SynthModel tiny_model(synth::Arch arch, GgmlType type, bool mtp = false) {
    return test::tiny_model(arch, type, 13, synth::GdnLayout::Split, mtp);
}

GgufFile tiny(synth::Arch arch, GgmlType type, bool mtp = false) {
    return test::to_file(tiny_model(arch, type, mtp), "tiny-q35.gguf");
}

size_t find(const synth::SynthModel& m, const std::string& name) {
    for (size_t i = 0; i < m.tensors.size(); ++i)
        if (m.tensors[i].name == name) return i;
    FAIL("no tensor " << name);
    return 0;
}

}  // namespace

TEST_CASE("qwen35 and qwen35moe forward match the float64 reference", "[model][qwen35][reference]") {
    for (auto arch : {synth::Arch::Qwen35, synth::Arch::Qwen35Moe})
        for (GgmlType type : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
            GgufFile f = tiny(arch, type);
            const HParams hp = HParams::from_gguf(f);
            REQUIRE(hp.ssm_dt_rank != hp.ssm_n_group);  // tiled and grouped orders differ
            const auto ref = reference_forward(f, kPrompt);
            auto m = Model::load(std::move(f));
            const Err e = compare(eval_all(*m, 2, kPrompt, 3), ref);
            INFO(synth::arch_name(arch) << " " << type_info(type).name << ": max |err| " << e.max_err
                                        << " of max |logit| " << e.max_ref);
            CHECK(e.rel() < 5e-4);
            CHECK(e.max_ref > 0.1);
        }
}

TEST_CASE("qwen35 files carry separate gate projections and IMROPE sections", "[model][qwen35]") {
    for (auto arch : {synth::Arch::Qwen35, synth::Arch::Qwen35Moe}) {
        const GgufFile f = tiny(arch, GgmlType::F32);
        CHECK(f.find_tensor("blk.0.ssm_beta.weight") != nullptr);
        CHECK(f.find_tensor("blk.0.ssm_alpha.weight") != nullptr);
        CHECK(f.find_tensor("blk.0.ssm_ba.weight") == nullptr);
        const std::string A(synth::arch_name(arch));
        CHECK(f.get(A + ".rope.dimension_sections").as_array().size() == 4);
        CHECK((f.find_tensor("blk.0.ffn_gate_exps.weight") != nullptr) == (arch == synth::Arch::Qwen35Moe));
        CHECK((f.find_tensor("blk.0.ffn_gate.weight") != nullptr) == (arch == synth::Arch::Qwen35));
    }
}

TEST_CASE("qwen35 forward is batch- and thread-count-invariant", "[model][qwen35][determinism]") {
    for (auto arch : {synth::Arch::Qwen35, synth::Arch::Qwen35Moe}) {
        auto m = Model::load(tiny(arch, GgmlType::Q4_K));
        const auto whole = eval_all(*m, 1, kPrompt, 64);
        CHECK(eval_all(*m, 1, kPrompt, 1) == whole);
        CHECK(eval_all(*m, 2, kPrompt, 3) == whole);
        CHECK(eval_all(*m, 3, kPrompt, 5) == whole);
    }
}

TEST_CASE("qwen35 MTP block matches the float64 reference", "[model][qwen35][mtp]") {
    for (auto arch : {synth::Arch::Qwen35, synth::Arch::Qwen35Moe}) {
        GgufFile f = tiny(arch, GgmlType::Q8_0, true);
        const int64_t T = 5, E = 256;
        const std::vector<int32_t> next = {5, 900, 17, 3, 640};
        std::mt19937 rng(5);
        std::normal_distribution<float> n01;
        std::vector<float> hidden(static_cast<size_t>(T * E));
        for (float& x : hidden) x = n01(rng);
        std::vector<std::vector<double>> hid_ref;
        for (int64_t t = 0; t < T; ++t) hid_ref.emplace_back(hidden.begin() + t * E, hidden.begin() + (t + 1) * E);
        const MtpReference ref = reference_mtp(f, hid_ref, next);
        auto m = Model::load(std::move(f));
        REQUIRE(m->has_mtp());
        REQUIRE(m->hp().n_embd == E);
        ThreadPool pool(2);
        CpuOps cpu_ops(pool);
        ForwardCtx ctx(cpu_ops, *m);
        SeqState s = m->new_state(ctx.ops, 16, GgmlType::F16);
        const int64_t V = m->hp().n_vocab;
        std::vector<float> logits(static_cast<size_t>(T * V)), hout(static_cast<size_t>(T * E));
        m->mtp_forward(ctx, s, hidden.data(), next.data(), T, 0, logits.data(), hout.data());
        const Err el = compare(logits, ref.logits), eh = compare(hout, ref.hidden);
        INFO(synth::arch_name(arch) << ": logits max |err| " << el.max_err << " of " << el.max_ref);
        CHECK(el.rel() < 5e-4);
        CHECK(eh.rel() < 5e-4);
        CHECK(el.max_ref > 0.1);
    }
}

TEST_CASE("qwen35 refuses malformed files clearly", "[model][qwen35]") {
    SECTION("a qwen3next gate tensor in place of ssm_beta / ssm_alpha") {
        auto sm = tiny_model(synth::Arch::Qwen35, GgmlType::F32);
        const size_t i = find(sm, "blk.0.ssm_beta.weight");
        sm.tensors[i].name = "blk.0.ssm_ba.weight";
        CHECK_THROWS_WITH(Model::load(test::to_file(std::move(sm))), Catch::Contains("blk.0.ssm_beta.weight"));
    }
    SECTION("rope sections missing or leaving a rotated pair unrotated") {
        for (const std::vector<int32_t>& sections : {std::vector<int32_t>{}, {3, 3, 2}, {2, 2, 2, 2}}) {
            auto sm = tiny_model(synth::Arch::Qwen35, GgmlType::F32);
            auto& kv = sm.metadata;
            std::erase_if(kv, [](const auto& p) { return p.first == "qwen35.rope.dimension_sections"; });
            if (!sections.empty()) kv.emplace_back("qwen35.rope.dimension_sections", GgufValue::i32_array(sections));
            INFO(sections.size() << " sections");
            CHECK_THROWS_WITH(Model::load(test::to_file(std::move(sm))), Catch::Contains("rope.dimension_sections"));
        }
    }
}
