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

namespace {

// The pair of files llama.cpp's converter writes with --no-mtp and --mtp.
std::pair<GgufFile, std::unique_ptr<GgufFile>> apart(synth::SynthModel&& sm, const char* name = "main.gguf") {
    auto [main, side] = synth::make_writers_mtp_apart(std::move(sm));
    const auto mb = main.to_bytes(), sb = side.to_bytes();
    return {GgufFile::from_bytes(mb.data(), mb.size(), name),
            std::make_unique<GgufFile>(GgufFile::from_bytes(sb.data(), sb.size(), "mtp-main.gguf"))};
}

// MTP logits and chained hidden rows of five pairs.
std::pair<std::vector<float>, std::vector<float>> mtp_rows(const Model& m) {
    const int64_t T = 5, E = m.hp().n_embd, V = m.hp().n_vocab;
    const std::vector<int32_t> next = {5, 900, 17, 3, 640};
    std::mt19937 rng(9);
    std::normal_distribution<float> n01;
    std::vector<float> hidden(static_cast<size_t>(T * E));
    for (float& x : hidden) x = n01(rng);
    ThreadPool pool(2);
    CpuOps cpu_ops(pool);
    ForwardCtx ctx(cpu_ops, m);
    SeqState s = m.new_state(ctx.ops, 16, GgmlType::F16);
    std::vector<float> logits(static_cast<size_t>(T * V)), hout(static_cast<size_t>(T * E));
    m.mtp_forward(ctx, s, hidden.data(), next.data(), T, 0, logits.data(), hout.data());
    return {logits, hout};
}

}  // namespace

TEST_CASE("an MTP block in its own file (llama.cpp's --mtp sidecar) computes as the one-file model",
          "[model][qwen35][mtp]") {
    for (auto arch : {synth::Arch::Qwen3Next, synth::Arch::Qwen35, synth::Arch::Qwen35Moe}) {
        INFO(synth::arch_name(arch));
        auto whole = Model::load(tiny(arch, GgmlType::Q8_0, true));
        {
            // The main file alone is a model without MTP, with the same main stack.
            auto [main, side] = apart(tiny_model(arch, GgmlType::Q8_0, true));
            auto alone = Model::load(std::move(main));
            CHECK_FALSE(alone->has_mtp());
            CHECK(alone->hp().n_layer == whole->hp().n_layer);
            CHECK(eval_all(*alone, 2, kPrompt, 4) == eval_all(*whole, 2, kPrompt, 4));
        }
        auto [main, side] = apart(tiny_model(arch, GgmlType::Q8_0, true));
        auto both = Model::load(std::move(main), std::move(side));
        REQUIRE(both->has_mtp());
        CHECK(both->hp().n_nextn == 1);
        CHECK(both->hp().n_layer == whole->hp().n_layer);
        CHECK(eval_all(*both, 2, kPrompt, 4) == eval_all(*whole, 2, kPrompt, 4));
        const auto [lw, hw] = mtp_rows(*whole);
        const auto [lb, hb] = mtp_rows(*both);
        CHECK(lb == lw);
        CHECK(hb == hw);
    }
}

TEST_CASE("an MTP file that does not fit the model is refused naming why", "[model][qwen35][mtp]") {
    const auto refused = [](std::pair<GgufFile, std::unique_ptr<GgufFile>> files, const char* why) {
        INFO(why);
        CHECK_THROWS_WITH(Model::load(std::move(files.first), std::move(files.second)), Catch::Contains(why));
    };
    const auto sidecar = [](synth::SynthModel sm) { return std::move(apart(std::move(sm)).second); };
    // A whole model given as the MTP file, or an MTP file beside a model that has its own.
    refused({tiny(synth::Arch::Qwen35, GgmlType::F32), std::make_unique<GgufFile>(tiny(synth::Arch::Qwen35, GgmlType::F32, true))},
            "not an MTP-only file");
    refused({tiny(synth::Arch::Qwen35, GgmlType::F32, true), sidecar(tiny_model(synth::Arch::Qwen35, GgmlType::F32, true))},
            "already holds an MTP block");
    // Another architecture, another size.
    refused({tiny(synth::Arch::Qwen35, GgmlType::F32), sidecar(tiny_model(synth::Arch::Qwen35Moe, GgmlType::F32, true))},
            "architecture");
    {
        auto sm = tiny_model(synth::Arch::Qwen35, GgmlType::F32, true);
        for (auto& [k, v] : sm.metadata)
            if (k == "qwen35.attention.head_count_kv") v = GgufValue::u32(static_cast<uint32_t>(v.as_int() * 2));
        refused({tiny(synth::Arch::Qwen35, GgmlType::F32), sidecar(std::move(sm))}, "head_count_kv");
    }
    // A missing tensor, one the model would not read, and a head of another type.
    {
        auto sm = tiny_model(synth::Arch::Qwen35, GgmlType::F32, true);
        const std::string layer = "blk." + std::to_string(sm.config.n_layer) + ".";
        sm.tensors[find(sm, layer + "nextn.eh_proj.weight")].name = layer + "nextn.eh_proj_typo.weight";
        refused({tiny(synth::Arch::Qwen35, GgmlType::F32), sidecar(std::move(sm))}, "nextn.eh_proj.weight");
    }
    {
        auto [main, side] = apart(tiny_model(synth::Arch::Qwen35, GgmlType::F32, true));
        auto sm = tiny_model(synth::Arch::Qwen35, GgmlType::F16, true);
        refused({std::move(main), sidecar(std::move(sm))}, "differs from the model's");
    }
    // Dense architectures have no MTP block.
    refused({test::to_file(test::tiny_model(synth::Arch::Llama, GgmlType::F32, 1)),
             sidecar(tiny_model(synth::Arch::Qwen35, GgmlType::F32, true))},
            "has no MTP block");
}
