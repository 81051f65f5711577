// llama / qwen3 / qwen3moe forward: agrees with the float64 reference on tiny synthetic
// models, and gives bit-identical logits whatever the window size or thread count.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

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
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe}) {
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
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe}) {
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
    ForwardCtx ctx(cpu_ops, *m);
    SeqState s = m->new_state(ctx.ops, 4, GgmlType::F16);
    std::vector<float> logits(static_cast<size_t>(m->hp().n_vocab) * 8);
    const std::vector<int32_t> bad = {1, static_cast<int32_t>(m->hp().n_vocab)};
    CHECK_THROWS_WITH(m->eval(ctx, s, bad, logits.data(), false), Catch::Contains("out of range"));
    const std::vector<int32_t> longp = {1, 2, 3, 4, 5};
    SeqState s2 = m->new_state(ctx.ops, 4, GgmlType::F16);
    CHECK_THROWS_WITH(m->eval(ctx, s2, longp, logits.data(), false), Catch::Contains("context holds 4"));
}

TEST_CASE("a stage binds only its own layers, prepared for its device", "[model][bind]") {
    auto m = Model::load(tiny(synth::Arch::Llama, GgmlType::Q8_0));  // Q8_0: packed on the CPU
    const int64_t L = m->hp().n_layer, E = m->hp().n_embd;
    REQUIRE(L >= 2);
    ThreadPool pool(1);
    CpuOps first(pool), last(pool), whole(pool);
    const auto wf = m->bind(first, 0, L / 2, /*embed=*/true, /*head=*/false);
    const auto wl = m->bind(last, L / 2, L, /*embed=*/false, /*head=*/true);
    const auto ww = m->bind(whole);
    // Each layer's matrices are prepared by the one stage that holds them.
    CHECK(first.prepared_bytes() > 0);
    CHECK(last.prepared_bytes() > 0);
    CHECK(wf->tok_embd.data != nullptr);  // the embedding goes with the first stage, the head with the last
    CHECK(wl->tok_embd.data == nullptr);
    CHECK(wl->output.data != nullptr);
    CHECK(wf->output.data == nullptr);
    CHECK(first.prepared_bytes() + last.prepared_bytes() == whole.prepared_bytes());
    const auto again = m->bind(whole);  // the same device binding again packs nothing new
    CHECK(first.prepared_bytes() + last.prepared_bytes() == whole.prepared_bytes());

    // Two stages' halves give the whole model's logits, bit for bit.
    const std::vector<int32_t> toks = {1, 17, 42, 5};
    const int64_t T = static_cast<int64_t>(toks.size());
    SeqState s1 = m->new_state(first, 16, GgmlType::F16, 0, L / 2), s2 = m->new_state(last, 16, GgmlType::F16, L / 2, L);
    ForwardCtx cf(first, wf.get()), cl(last, wl.get());
    std::vector<float> x(static_cast<size_t>(T * E)), split(static_cast<size_t>(m->hp().n_vocab));
    m->embed(cf, toks.data(), T, x.data());
    m->run_layers(cf, Batch::single(s1, 0, T), 0, L / 2, x.data());
    m->run_layers(cl, Batch::single(s2, 0, T), L / 2, L, x.data());
    const Model::OutputWant want{false, nullptr};
    m->output(cl, Batch::single(s2, 0, T), x.data(), std::span<const Model::OutputWant>(&want, 1), split.data());
    ForwardCtx cw(whole, ww.get());
    SeqState s = m->new_state(whole, 16, GgmlType::F16);
    std::vector<float> full(split.size());
    m->eval(cw, s, toks, full.data(), false);
    CHECK(split == full);

    // What a stage did not bind, it cannot run.
    CHECK_THROWS_WITH(m->run_layers(cf, Batch::single(s1, 0, T), L / 2, L, x.data()), Catch::Contains("not bound"));
    CHECK_THROWS_WITH(m->embed(cl, toks.data(), T, x.data()), Catch::Contains("embedding"));
    CHECK_THROWS_WITH(m->output(cf, Batch::single(s1, 0, T), x.data(), std::span<const Model::OutputWant>(&want, 1),
                                split.data()),
                      Catch::Contains("LM head"));
}

TEST_CASE("the CPU reads the embedding table from a copy of its rows, made once", "[model][bind]") {
    // get_rows read the file mapping in place: a fault on the first touch of each page of
    // the table, which a decode step's token row usually is.
    const size_t rb = row_bytes(GgmlType::Q8_0, 64);
    std::vector<uint8_t> file(rb * 12 * 2);  // 12 rows, every other one of a wider view
    for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<uint8_t>(i * 7 + 3);
    for (size_t b = 0; b < file.size(); b += 34) file[b] = 0, file[b + 1] = 0x3c;  // each block's scale: 1.0 (f16)
    const MatView t{GgmlType::Q8_0, file.data(), 64, 12, 2 * rb, nullptr};
    ThreadPool pool(1);
    CpuOps ops(pool);
    const MatView c = ops.prepare_table(t);
    CHECK(c.data != t.data);
    CHECK(c.row_stride == rb);
    CHECK(ops.prepared_bytes() >= rb * 12);
    for (int64_t r = 0; r < 12; ++r) CHECK(std::memcmp(c.row(r), t.row(r), rb) == 0);
    const size_t made = ops.prepared_bytes();
    CHECK(ops.prepare_table(t).data == c.data);  // a stage's MTP block shares the table
    CHECK(ops.prepared_bytes() == made);
    // get_rows through the copy gives the rows of the file.
    const std::vector<int32_t> ids = {11, 0, 5};
    std::vector<float> got(3 * 64), want(64);
    ops.get_rows(c, ids.data(), Tensor::f32(got.data(), 64, 3));
    for (size_t i = 0; i < ids.size(); ++i) {
        dequantize_row(GgmlType::Q8_0, t.row(ids[i]), want.data(), 64);
        CHECK(std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(i * 64)));
    }
}

TEST_CASE("the CPU keeps an F32 matrix of BF16 values as BF16, with the same products", "[model][bind]") {
    // A GGUF converted from a BF16 checkpoint holds its routers in F32 (and every matrix,
    // for an F32 file): each value a BF16 one widened. Stored as BF16 a product reads half
    // the bytes and computes the same floats.
    const int64_t n_in = 100, n_out = 9, T = 3;
    std::vector<float> exact(static_cast<size_t>(n_in * n_out));
    for (size_t i = 0; i < exact.size(); ++i) {
        const float v = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u &= 0xFFFF0000u;  // a BF16 value
        std::memcpy(&exact[i], &u, 4);
    }
    std::vector<float> other = exact;
    other[5 * n_in + 7] = 0.1f;  // one value that is not
    std::vector<float> x(static_cast<size_t>(T * n_in));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
    ThreadPool pool(2);
    CpuOps ops(pool);
    auto view = [&](const std::vector<float>& v) {
        return MatView{GgmlType::F32, v.data(), n_in, n_out, sizeof(float) * static_cast<size_t>(n_in), nullptr};
    };
    auto product = [&](const MatView& w) {
        std::vector<float> y(static_cast<size_t>(T * n_out));
        ops.matmul(w, Tensor::f32(x.data(), n_in, T), Tensor::f32(y.data(), n_out, T));
        return y;
    };
    const MatView b = ops.prepare_weight(view(exact));
    CHECK(b.type == GgmlType::BF16);
    CHECK(b.row_stride == 2 * static_cast<size_t>(n_in));
    CHECK(ops.prepared_bytes() >= 2 * static_cast<size_t>(n_in * n_out));
    CHECK(product(b) == product(view(exact)));
    const size_t made = ops.prepared_bytes();
    CHECK(ops.prepare_weight(view(exact)).data == b.data);  // once per matrix
    CHECK(ops.prepared_bytes() == made);
    // One value that BF16 cannot hold: the matrix stays F32, as the file has it.
    const MatView f = ops.prepare_weight(view(other));
    CHECK(f.type == GgmlType::F32);
    CHECK(f.data == other.data());
    CHECK(ops.prepared_bytes() == made);
}

TEST_CASE("llama 3.1+ rope_freqs divide the rotary angles, as in the reference", "[model][reference]") {
    // A file with rope_freqs.weight (what llama.cpp's converter writes for llama3 rope
    // scaling) is computed with it: the reference applies it, and the same weights without
    // it give other logits, so a model that ignored the tensor would fail the first check.
    const std::vector<int32_t> toks = {1, 17, 42, 5, 99, 3, 250, 7, 11, 64, 8, 2};
    synth::SynthOptions o;
    o.arch = synth::Arch::Llama;
    o.type = GgmlType::F32;
    o.seed = 5;
    o.rope_freqs = true;
    GgufFile f = test::to_file(synth::build_model(o));
    REQUIRE(f.find_tensor("rope_freqs.weight") != nullptr);
    const auto ref = reference_forward(f, toks);
    auto m = Model::load(std::move(f));
    const auto got = eval_all(*m, 2, toks, 5);
    const auto e = compare(got, ref);
    INFO("max |err| " << e.max_err << " of max |logit| " << e.max_ref);
    CHECK(e.rel() < 3e-3);
    o.rope_freqs = false;
    const auto plain = eval_all(*Model::load(test::to_file(synth::build_model(o))), 2, toks, 5);
    CHECK(compare(plain, ref).rel() > 3e-2);
}

TEST_CASE("a tensor the model does not use is a load error naming it", "[model]") {
    synth::SynthModel sm = test::tiny_model(synth::Arch::Llama, GgmlType::F32, 1);
    synth::TensorPlan extra;
    extra.name = "blk.0.attn_q.bias";  // a bias Strata's llama does not add
    extra.ne = {sm.config.n_head * sm.config.head_dim};
    sm.tensors.push_back(extra);
    sm.data.emplace_back(static_cast<size_t>(extra.n_elements()) * sizeof(float), uint8_t{0});
    CHECK_THROWS_WITH(Model::load(test::to_file(std::move(sm))),
                      Catch::Contains("tensor 'blk.0.attn_q.bias' is not used by Strata's llama model"));
}

TEST_CASE("YaRN rope scaling follows the reference", "[model][reference]") {
    // rope.scaling.type yarn (Qwen's long-context configs): the ramp between the
    // correction dims and the magnitude scale, on both pair layouts (llama adjacent,
    // qwen3 NEOX); the same weights with plain RoPE give other logits.
    const std::vector<int32_t> toks = {1, 17, 42, 5, 99, 3, 250, 7, 11, 64};
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe}) {
        synth::SynthOptions o;
        o.arch = arch;
        o.type = GgmlType::F32;
        o.seed = 6;
        o.yarn_factor = 4;
        GgufFile f = test::to_file(synth::build_model(o));
        const HParams hp = HParams::from_gguf(f);
        CHECK(hp.rope_ext_factor == 1.0f);
        CHECK(hp.rope_corr_high > hp.rope_corr_low);
        CHECK(hp.rope_mscale > 1.1f);  // 1 + 0.1 ln 4
        const auto ref = reference_forward(f, toks);
        const auto e = compare(eval_all(*Model::load(std::move(f)), 2, toks, 4), ref);
        INFO(synth::arch_name(arch) << ": max |err| " << e.max_err << " of max |logit| " << e.max_ref);
        CHECK(e.rel() < 3e-3);
        o.yarn_factor = 0;
        CHECK(compare(eval_all(*Model::load(test::to_file(synth::build_model(o))), 2, toks, 4), ref).rel() > 3e-2);
    }
}
