// strata make-model (engine/synth): determinism, llama.cpp tensor names and shapes per
// architecture (MODEL_SPEC 3.2, 5.2, 5.5), metadata keys and types, the tokenizer
// section, --type handling with fallbacks, weight scales, and flag parsing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <span>
#include <vector>

#include "engine/core/flags.h"
#include "engine/gguf/reader.h"
#include "engine/quant/quant.h"
#include "engine/synth/bpe_trainer.h"
#include "engine/synth/model_writer.h"
#include "engine/synth/options.h"
#include "engine/synth/rng.h"
#include "engine/synth/vocab.h"

using namespace strata;
using namespace strata::synth;

namespace {

std::vector<uint8_t> model_bytes(const SynthOptions& o) { return make_writer(build_model(o)).to_bytes(); }

GgufFile parse(const std::vector<uint8_t>& bytes) { return GgufFile::from_bytes(bytes.data(), bytes.size()); }

SynthOptions opts(Arch a, GgmlType t = GgmlType::F16, uint64_t seed = 1) {
    SynthOptions o;
    o.arch = a;
    o.type = t;
    o.seed = seed;
    return o;
}

std::map<std::string, std::vector<int64_t>> shapes(const ModelPlan& p) {
    std::map<std::string, std::vector<int64_t>> m;
    for (const auto& t : p.tensors) m[t.name] = t.ne;
    return m;
}

using Shape = std::vector<int64_t>;

// Qwen3-Next-80B-A3B hyperparameters (MODEL_SPEC 4.1), to compare against the
// literal shapes of MODEL_SPEC 5.2 without generating any data.
// The 80b-a3b preset: Qwen3-Next-80B-A3B's shapes (MODEL_SPEC 4.1), checked below tensor by tensor.
ModelConfig qwen3next_80b() { return make_config(Arch::Qwen3Next, Preset::A80B); }

std::vector<char*> argv_of(std::vector<std::string>& args) {
    std::vector<char*> v;
    for (auto& a : args) v.push_back(a.data());
    return v;
}

SynthOptions parse_flags(std::vector<std::string> args) {
    args.insert(args.begin(), "make-model");
    auto argv = argv_of(args);
    Flags f = make_model_flags();
    f.parse(static_cast<int>(argv.size()), argv.data());
    return options_from_flags(f);
}

std::vector<float> f32_data(const GgufTensorInfo& t) {
    REQUIRE(t.type == GgmlType::F32);
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
}

double rms(const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / double(v.size()));
}

}  // namespace

TEST_CASE("make-model: same seed gives the same bytes, whatever the thread count", "[make-model]") {
    for (Arch a : {Arch::Llama, Arch::Qwen3Next}) {
        SynthOptions o = opts(a, GgmlType::Q8_0, 42);
        o.mtp = a == Arch::Qwen3Next;
        o.threads = 1;
        const auto one = model_bytes(o);
        o.threads = 2;
        const auto two = model_bytes(o);
        o.threads = 3;
        const auto three = model_bytes(o);
        CHECK(one == two);
        CHECK(one == three);
    }
}

TEST_CASE("make-model: a different seed changes every random tensor", "[make-model]") {
    const GgufFile a = parse(model_bytes(opts(Arch::Qwen3, GgmlType::F16, 1)));
    const GgufFile b = parse(model_bytes(opts(Arch::Qwen3, GgmlType::F16, 2)));
    REQUIRE(a.tensors().size() == b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        const auto& ta = a.tensors()[i];
        const auto& tb = b.tensors()[i];
        REQUIRE(ta.name == tb.name);
        INFO(ta.name);
        CHECK(std::memcmp(ta.data, tb.data, ta.nbytes) != 0);
    }
    // The tokenizer does not depend on the seed.
    CHECK(a.get_string_array("tokenizer.ggml.tokens") == b.get_string_array("tokenizer.ggml.tokens"));
}

TEST_CASE("make-model: rng and per-tensor seeds are fixed", "[make-model]") {
    // Pinned values: a change here changes every synthetic model ever written.
    Rng r(0);
    CHECK(r.next() == 0x99EC5F36CB75F2B4ull);
    CHECK(tensor_seed(1, "a") != tensor_seed(1, "b"));
    CHECK(tensor_seed(1, "a") != tensor_seed(2, "a"));
    Rng g(7);
    double s = 0, s2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        const double x = g.normal();
        s += x;
        s2 += x * x;
    }
    CHECK(std::abs(s / n) < 0.01);
    CHECK(std::abs(s2 / n - 1.0) < 0.02);
}

TEST_CASE("make-model: llama and qwen3 tensor names and shapes", "[make-model]") {
    // TinyLlama-1.1B (the llama 1b preset): MODEL_SPEC 3.2 shapes.
    const ModelConfig c = make_config(Arch::Llama, Preset::B1);
    const ModelPlan p = plan_tensors(c, GgmlType::Q8_0);
    CHECK(p.tensors.size() == 3 + 9 * 22);
    auto s = shapes(p);
    CHECK(s.at("token_embd.weight") == Shape{2048, 32000});
    CHECK(s.at("output.weight") == Shape{2048, 32000});
    CHECK(s.at("output_norm.weight") == Shape{2048});
    CHECK(s.at("blk.21.attn_q.weight") == Shape{2048, 2048});
    CHECK(s.at("blk.21.attn_k.weight") == Shape{2048, 256});
    CHECK(s.at("blk.21.attn_v.weight") == Shape{2048, 256});
    CHECK(s.at("blk.21.attn_output.weight") == Shape{2048, 2048});
    CHECK(s.at("blk.0.ffn_gate.weight") == Shape{2048, 5632});
    CHECK(s.at("blk.0.ffn_up.weight") == Shape{2048, 5632});
    CHECK(s.at("blk.0.ffn_down.weight") == Shape{5632, 2048});
    CHECK(s.at("blk.0.attn_norm.weight") == Shape{2048});
    CHECK(s.at("blk.0.ffn_norm.weight") == Shape{2048});
    CHECK(s.count("blk.0.attn_q_norm.weight") == 0);
    CHECK(count_params(c) > 1'050'000'000);
    CHECK(count_params(c) < 1'150'000'000);

    // qwen3 adds per-head q/k norms; head_dim != n_embd / n_head.
    const ModelConfig q = make_config(Arch::Qwen3, Preset::Tiny);
    REQUIRE(q.head_dim * q.n_head != q.n_embd);
    auto qs = shapes(plan_tensors(q, GgmlType::F16));
    CHECK(qs.size() == 3 + 11 * size_t(q.n_layer));
    CHECK(qs.at("blk.1.attn_q_norm.weight") == Shape{q.head_dim});
    CHECK(qs.at("blk.1.attn_k_norm.weight") == Shape{q.head_dim});
    CHECK(qs.at("blk.1.attn_q.weight") == Shape{q.n_embd, q.n_head * q.head_dim});
    CHECK(qs.at("blk.1.attn_output.weight") == Shape{q.n_head * q.head_dim, q.n_embd});
}

TEST_CASE("make-model: qwen3next tensor names and shapes match MODEL_SPEC 5.2 for 80B", "[make-model]") {
    ModelConfig c = qwen3next_80b();
    const ModelPlan split = plan_tensors(c, GgmlType::Q4_K);
    CHECK(split.tensors.size() == 843);  // MODEL_SPEC 5.2: current layout
    auto s = shapes(split);
    CHECK(s.at("token_embd.weight") == Shape{2048, 151936});
    CHECK(s.at("output.weight") == Shape{2048, 151936});
    // layer 3: full attention
    CHECK(s.at("blk.3.attn_q.weight") == Shape{2048, 8192});
    CHECK(s.at("blk.3.attn_k.weight") == Shape{2048, 512});
    CHECK(s.at("blk.3.attn_v.weight") == Shape{2048, 512});
    CHECK(s.at("blk.3.attn_output.weight") == Shape{4096, 2048});
    CHECK(s.at("blk.3.attn_q_norm.weight") == Shape{256});
    CHECK(s.at("blk.3.attn_k_norm.weight") == Shape{256});
    CHECK(s.count("blk.3.ssm_a") == 0);
    // layer 0: Gated DeltaNet
    CHECK(s.at("blk.0.attn_qkv.weight") == Shape{2048, 8192});
    CHECK(s.at("blk.0.attn_gate.weight") == Shape{2048, 4096});
    CHECK(s.at("blk.0.ssm_ba.weight") == Shape{2048, 64});
    CHECK(s.at("blk.0.ssm_conv1d.weight") == Shape{4, 8192});
    CHECK(s.at("blk.0.ssm_dt.bias") == Shape{32});
    CHECK(s.at("blk.0.ssm_a") == Shape{32});
    CHECK(s.at("blk.0.ssm_norm.weight") == Shape{128});
    CHECK(s.at("blk.0.ssm_out.weight") == Shape{4096, 2048});
    CHECK(s.count("blk.0.attn_q.weight") == 0);
    // MoE on every layer
    for (int il : {0, 3, 47}) {
        const std::string b = "blk." + std::to_string(il) + ".";
        CHECK(s.at(b + "attn_norm.weight") == Shape{2048});
        CHECK(s.at(b + "post_attention_norm.weight") == Shape{2048});
        CHECK(s.at(b + "ffn_gate_inp.weight") == Shape{2048, 512});
        CHECK(s.at(b + "ffn_gate_exps.weight") == Shape{2048, 512, 512});
        CHECK(s.at(b + "ffn_up_exps.weight") == Shape{2048, 512, 512});
        CHECK(s.at(b + "ffn_down_exps.weight") == Shape{512, 2048, 512});
        CHECK(s.at(b + "ffn_gate_inp_shexp.weight") == Shape{2048});
        CHECK(s.at(b + "ffn_gate_shexp.weight") == Shape{2048, 512});
        CHECK(s.at(b + "ffn_up_shexp.weight") == Shape{2048, 512});
        CHECK(s.at(b + "ffn_down_shexp.weight") == Shape{512, 2048});
        CHECK(s.count(b + "ffn_norm.weight") == 0);
    }

    c.gdn_layout = GdnLayout::Fused;
    const ModelPlan fused = plan_tensors(c, GgmlType::Q4_K);
    CHECK(fused.tensors.size() == 807);  // MODEL_SPEC 5.2: legacy layout
    auto f = shapes(fused);
    CHECK(f.at("blk.0.ssm_in.weight") == Shape{2048, 12288});
    CHECK(f.count("blk.0.attn_qkv.weight") == 0);
    CHECK(f.count("blk.0.attn_gate.weight") == 0);
    CHECK(f.at("blk.0.ssm_ba.weight") == Shape{2048, 64});

    // MTP: block 48 = nextn tensors + a full-attention MoE layer (MODEL_SPEC 5.5.3).
    c.gdn_layout = GdnLayout::Split;
    c.mtp = true;
    const ModelPlan mtp = plan_tensors(c, GgmlType::Q4_K);
    CHECK(mtp.tensors.size() == 843 + 16 + 4);
    auto m = shapes(mtp);
    CHECK(m.at("blk.48.nextn.eh_proj.weight") == Shape{4096, 2048});
    CHECK(m.at("blk.48.nextn.enorm.weight") == Shape{2048});
    CHECK(m.at("blk.48.nextn.hnorm.weight") == Shape{2048});
    CHECK(m.at("blk.48.nextn.shared_head_norm.weight") == Shape{2048});
    CHECK(m.at("blk.48.attn_q.weight") == Shape{2048, 8192});
    CHECK(m.at("blk.48.attn_q_norm.weight") == Shape{256});
    CHECK(m.at("blk.48.ffn_down_exps.weight") == Shape{512, 2048, 512});
    CHECK(m.count("blk.48.ssm_a") == 0);
    CHECK(m.count("blk.48.nextn.embed_tokens.weight") == 0);
    CHECK(m.count("blk.48.nextn.shared_head_head.weight") == 0);
    CHECK(m.count("blk.49.attn_norm.weight") == 0);
}

TEST_CASE("make-model: files read back with the plan's names, types and shapes", "[make-model]") {
    struct Case { Arch arch; bool mtp; GdnLayout layout; };
    for (const Case& k : {Case{Arch::Llama, false, GdnLayout::Split}, Case{Arch::Qwen3, false, GdnLayout::Split},
                          Case{Arch::Qwen3Next, false, GdnLayout::Split}, Case{Arch::Qwen3Next, true, GdnLayout::Fused}}) {
        SynthOptions o = opts(k.arch, GgmlType::Q8_0, 3);
        o.mtp = k.mtp;
        o.gdn_layout = k.layout;
        const ModelConfig c = config_for(o);
        const ModelPlan p = plan_tensors(c, o.type);
        const GgufFile f = parse(model_bytes(o));
        REQUIRE(f.tensors().size() == p.tensors.size());
        for (size_t i = 0; i < p.tensors.size(); ++i) {
            const auto& t = f.tensors()[i];
            INFO(t.name);
            CHECK(t.name == p.tensors[i].name);
            CHECK(t.type == p.tensors[i].type);
            CHECK(t.n_dims == p.tensors[i].ne.size());
            for (size_t d = 0; d < p.tensors[i].ne.size(); ++d) CHECK(t.ne[d] == p.tensors[i].ne[d]);
        }
        if (k.arch == Arch::Qwen3Next) {
            // tiny still has both layer kinds, MoE with top-2 and a shared expert
            CHECK(f.find_tensor("blk.0.ssm_a") != nullptr);
            CHECK(f.find_tensor("blk.3.attn_q.weight") != nullptr);
            CHECK(f.get_int("qwen3next.expert_used_count") == 2);
            CHECK(f.get_int("qwen3next.expert_count") >= 4);
            CHECK(f.find_tensor("blk.0.ffn_down_shexp.weight") != nullptr);
            CHECK(f.get_int("qwen3next.block_count") == c.n_layer + (k.mtp ? 1 : 0));
            CHECK(f.has("qwen3next.nextn_predict_layers") == k.mtp);
            if (k.mtp) CHECK(f.find_tensor("blk.4.nextn.eh_proj.weight") != nullptr);
            CHECK((f.find_tensor("blk.0.ssm_in.weight") != nullptr) == (k.layout == GdnLayout::Fused));
        }
    }
}

TEST_CASE("make-model: metadata keys are present with llama.cpp's types", "[make-model]") {
    using T = GgufType;
    const std::vector<std::pair<std::string, T>> common = {
        {"general.architecture", T::STRING}, {"general.name", T::STRING}, {"general.file_type", T::UINT32},
        {"general.quantization_version", T::UINT32}, {".context_length", T::UINT32},
        {".embedding_length", T::UINT32}, {".block_count", T::UINT32}, {".feed_forward_length", T::UINT32},
        {".attention.head_count", T::UINT32}, {".attention.head_count_kv", T::UINT32},
        {".attention.key_length", T::UINT32}, {".attention.value_length", T::UINT32},
        {".attention.layer_norm_rms_epsilon", T::FLOAT32}, {".rope.freq_base", T::FLOAT32},
        {".rope.dimension_count", T::UINT32}, {"tokenizer.ggml.model", T::STRING},
        {"tokenizer.ggml.pre", T::STRING}, {"tokenizer.ggml.tokens", T::ARRAY},
        {"tokenizer.ggml.token_type", T::ARRAY}, {"tokenizer.ggml.merges", T::ARRAY},
        {"tokenizer.ggml.bos_token_id", T::UINT32}, {"tokenizer.ggml.eos_token_id", T::UINT32},
        {"tokenizer.ggml.padding_token_id", T::UINT32}, {"tokenizer.ggml.add_bos_token", T::BOOL},
        {"tokenizer.chat_template", T::STRING}};
    const std::vector<std::pair<std::string, T>> next = {
        {".expert_count", T::UINT32}, {".expert_used_count", T::UINT32},
        {".expert_feed_forward_length", T::UINT32}, {".expert_shared_feed_forward_length", T::UINT32},
        {".ssm.conv_kernel", T::UINT32}, {".ssm.state_size", T::UINT32}, {".ssm.group_count", T::UINT32},
        {".ssm.time_step_rank", T::UINT32}, {".ssm.inner_size", T::UINT32},
        {".full_attention_interval", T::UINT32}, {".nextn_predict_layers", T::UINT32}};
    for (Arch a : {Arch::Llama, Arch::Qwen3, Arch::Qwen3Next, Arch::Qwen3Moe, Arch::Qwen35, Arch::Qwen35Moe}) {
        SynthOptions o = opts(a, GgmlType::Q8_0);
        o.mtp = a == Arch::Qwen3Next || a == Arch::Qwen35 || a == Arch::Qwen35Moe;
        const GgufFile f = parse(model_bytes(o));
        const std::string A(arch_name(a));
        auto check = [&](const std::string& k, T t) {
            const std::string key = k[0] == '.' ? A + k : k;
            INFO(key);
            const GgufValue* v = f.find(key);
            REQUIRE(v != nullptr);
            CHECK(v->type() == t);
        };
        for (const auto& [k, t] : common) check(k, t);
        if (a == Arch::Qwen3Next || a == Arch::Qwen35Moe)
            for (const auto& [k, t] : next) check(k, t);
        else if (a == Arch::Qwen3Moe)
            for (const auto& [k, t] : std::span(next).first(3)) check(k, t);  // the expert counts alone
        else if (a == Arch::Qwen35)
            for (const auto& [k, t] : std::span(next).subspan(4)) check(k, t);  // the hybrid keys, no experts
        if (a != Arch::Qwen3Next && a != Arch::Qwen3Moe && a != Arch::Qwen35Moe) CHECK(!f.has(A + ".expert_count"));
        CHECK(f.has(A + ".expert_shared_feed_forward_length") == (a == Arch::Qwen3Next || a == Arch::Qwen35Moe));
        CHECK(f.has(A + ".rope.dimension_sections") == (a == Arch::Qwen35 || a == Arch::Qwen35Moe));
        CHECK(f.has("llama.vocab_size") == (a == Arch::Llama));
        CHECK(f.get_string("general.architecture") == A);
        CHECK(f.get_int("general.file_type") == 7);
        CHECK(f.get_int("general.quantization_version") == 2);
        CHECK(f.get("tokenizer.ggml.tokens").array_type() == T::STRING);
        CHECK(f.get("tokenizer.ggml.token_type").array_type() == T::INT32);
        CHECK(f.get("tokenizer.ggml.merges").array_type() == T::STRING);
        if (a == Arch::Qwen3Next) {
            const ModelConfig c = config_for(o);
            CHECK(f.get_int("qwen3next.rope.dimension_count") == c.head_dim / 4);
            CHECK(f.get_int("qwen3next.ssm.inner_size") == c.ssm_d_state * c.ssm_dt_rank);
            CHECK(f.get_int("qwen3next.full_attention_interval") == 4);
        }
    }
}

TEST_CASE("make-model: tokenizer arrays are consistent", "[make-model][tokenizer]") {
    const GgufFile f = parse(model_bytes(opts(Arch::Qwen3Next)));
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    REQUIRE(tokens.size() == types.size());
    CHECK(int64_t(tokens.size()) == f.tensor("token_embd.weight").ne[1]);
    CHECK(int64_t(tokens.size()) == f.tensor("output.weight").ne[1]);
    std::map<std::string, size_t> id;
    for (size_t i = 0; i < tokens.size(); ++i) CHECK(id.emplace(tokens[i], i).second);  // unique
    for (int b = 0; b < 256; ++b) {
        INFO(b);
        REQUIRE(id.count(byte_to_unicode(uint8_t(b))));
        CHECK(types[id[byte_to_unicode(uint8_t(b))]] == kNormal);
    }
    CHECK(tokens[0] == "!");
    CHECK(id.at("Ġ") == 220);  // GPT-2 / Qwen id of the space byte
    CHECK(merges.size() >= 500);
    for (const auto& m : merges) {
        INFO(m);
        const size_t sp = m.find(' ', 1);
        REQUIRE(sp != std::string::npos);
        const std::string l = m.substr(0, sp), r = m.substr(sp + 1);
        CHECK(id.count(l));
        CHECK(id.count(r));
        CHECK(id.count(l + r));
    }
    CHECK(id.count("Ġthe"));
    CHECK(id.count("Ġand"));
    const size_t eot = id.at("<|endoftext|>"), im_end = id.at("<|im_end|>");
    CHECK(types[eot] == kControl);
    CHECK(types[id.at("<|im_start|>")] == kControl);
    CHECK(types[im_end] == kControl);
    CHECK(types[id.at("<think>")] == kUserDefined);
    CHECK(types[id.at("</think>")] == kUserDefined);
    CHECK(types[id.at("<tool_call>")] == kUserDefined);
    CHECK(size_t(f.get_int("tokenizer.ggml.bos_token_id")) == eot);
    CHECK(size_t(f.get_int("tokenizer.ggml.eos_token_id")) == im_end);
    CHECK(size_t(f.get_int("tokenizer.ggml.padding_token_id")) == eot);
    CHECK(f.get_bool("tokenizer.ggml.add_bos_token") == false);
    CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(f.get_string("tokenizer.ggml.pre") == "qwen2");
    CHECK(types.back() == kUnused);
    CHECK(tokens.back().rfind("<|reserved_", 0) == 0);
    const std::string tpl = f.get_string("tokenizer.chat_template");
    CHECK(tpl.find("<|im_start|>") != std::string::npos);
    CHECK(tpl.find("add_generation_prompt") != std::string::npos);
    CHECK(tpl.find("enable_thinking") != std::string::npos);

    // A 32000-row vocabulary: same learned part, padded with reserved tokens.
    const SynthVocab big = build_vocab(32000);
    CHECK(big.tokens.size() == 32000);
    CHECK(big.types.size() == 32000);
    CHECK(std::vector<std::string>(big.tokens.begin(), big.tokens.begin() + 300) ==
          std::vector<std::string>(tokens.begin(), tokens.begin() + 300));
    CHECK(build_vocab(256 + n_added_tokens()).merges.empty());
    CHECK_THROWS_AS(build_vocab(256 + n_added_tokens() - 1), Error);
}

TEST_CASE("make-model: byte-level BPE pieces", "[make-model][tokenizer]") {
    CHECK(byte_to_unicode(' ') == "Ġ");
    CHECK(byte_to_unicode('\n') == "Ċ");
    CHECK(byte_to_unicode('\t') == "ĉ");
    CHECK(byte_to_unicode(0x7F) == "ġ");   // U+0121
    CHECK(byte_to_unicode(0xAD) == "Ń");   // U+0143
    CHECK(byte_to_unicode('a') == "a");
    CHECK(byte_to_unicode(0xE9) == "é");
    CHECK(gpt2_byte_order().size() == 256);
    CHECK(std::set<uint8_t>(gpt2_byte_order().begin(), gpt2_byte_order().end()).size() == 256);

    using V = std::vector<std::string>;
    CHECK(pretokenize("Hello,  world! It's 2024...\n\n  ok  ") ==
          V{"Hello", ",", " ", " world", "!", " It", "'s", " ", "2", "0", "2", "4", "...\n\n", " ", " ok", "  "});
    CHECK(pretokenize("we'RE done") == V{"we", "'RE", " done"});
    CHECK(pretokenize("a\n\nb") == V{"a", "\n\n", "b"});
    CHECK(pretokenize(" (x)") == V{" (", "x", ")"});

    // Ties go to the lexicographically smallest pair of token strings.
    const BpeResult r = train_bpe("ab cd", 10, 1);
    CHECK(r.merges == V{"a b", "c d", "Ġ cd"});
    CHECK(r.tokens.size() == 259);
    // Deterministic, and a smaller budget is a prefix of a larger one.
    const BpeResult a = train_bpe(embedded_corpus(), 300), b = train_bpe(embedded_corpus(), 100);
    CHECK(a.merges == train_bpe(embedded_corpus(), 300).merges);
    CHECK(std::equal(b.merges.begin(), b.merges.end(), a.merges.begin()));
}

TEST_CASE("make-model: --type goes to weight matrices only, with fallbacks", "[make-model]") {
    const ModelConfig c = make_config(Arch::Qwen3Next, Preset::Tiny);
    const ModelPlan p = plan_tensors(c, GgmlType::Q4_K);
    CHECK(p.notes.empty());
    const std::set<std::string> f32_suffix = {"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight",
                                              "ssm_conv1d.weight", "ssm_a", "ssm_dt.bias"};
    for (const auto& t : p.tensors) {
        INFO(t.name);
        bool keep_f32 = false;
        for (const auto& s : f32_suffix)
            keep_f32 = keep_f32 || (t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0);
        CHECK(t.type == (keep_f32 ? GgmlType::F32 : GgmlType::Q4_K));
        CHECK(t.weight_matrix == !keep_f32);
    }

    CHECK(fit_type(GgmlType::Q4_K, 512) == GgmlType::Q4_K);
    CHECK(fit_type(GgmlType::Q4_K, 96) == GgmlType::Q8_0);
    CHECK(fit_type(GgmlType::Q4_0, 100) == GgmlType::F16);
    CHECK(fit_type(GgmlType::BF16, 7) == GgmlType::BF16);

    ModelConfig odd = make_config(Arch::Llama, Preset::Tiny);
    odd.n_ff = 800;  // multiple of 32, not of 256
    const ModelPlan q = plan_tensors(odd, GgmlType::Q4_K);
    REQUIRE(q.notes.size() == 1);
    CHECK(q.notes[0].find("q8_0") != std::string::npos);
    for (const auto& t : q.tensors) {
        if (t.name.find("ffn_down") != std::string::npos) {
            CHECK(t.type == GgmlType::Q8_0);
        } else if (t.weight_matrix) {
            CHECK(t.type == GgmlType::Q4_K);
        }
    }
    odd.n_ff = 100;  // not even a multiple of 32
    const ModelPlan h = plan_tensors(odd, GgmlType::Q8_0);
    REQUIRE(h.notes.size() == 1);
    CHECK(h.notes[0].find("f16") != std::string::npos);
    // The fallback model still builds and reads back.
    const GgufFile f = parse(make_writer(build_model(odd, GgmlType::Q8_0, 5)).to_bytes());
    CHECK(f.tensor("blk.0.ffn_down.weight").type == GgmlType::F16);
    CHECK(f.tensor("blk.0.ffn_up.weight").type == GgmlType::Q8_0);

    // Unquantized files carry no quantization_version.
    const GgufFile bf = parse(model_bytes(opts(Arch::Llama, GgmlType::BF16)));
    CHECK(!bf.has("general.quantization_version"));
    CHECK(bf.get_int("general.file_type") == 32);
    CHECK(bf.tensor("token_embd.weight").type == GgmlType::BF16);
    CHECK(bf.tensor("output_norm.weight").type == GgmlType::F32);
}

TEST_CASE("make-model: every weight type encodes the same values", "[make-model]") {
    // Same (seed, name) -> same f32 values before encoding, so each type's bytes
    // must dequantize close to the f32 tensor.
    const ModelConfig c = make_config(Arch::Llama, Preset::Tiny);
    TensorPlan t;
    t.name = "blk.0.attn_q.weight";
    t.ne = {256, 16};
    t.weight_matrix = true;
    t.type = GgmlType::F32;
    const auto ref_bytes = generate_tensor(t, c, 77);
    std::vector<float> ref(256 * 16);
    std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
    const double ref_rms = rms(ref);
    int n_types = 0;
    for (GgmlType type : supported_types()) {
        if (!llama_file_type(type)) continue;
        ++n_types;
        INFO(type_info(type).name);
        t.type = type;
        const auto bytes = generate_tensor(t, c, 77);
        REQUIRE(bytes.size() == row_bytes(type, 256) * 16);
        std::vector<float> back(ref.size());
        for (int r = 0; r < 16; ++r) dequantize_row(type, bytes.data() + r * row_bytes(type, 256), back.data() + r * 256, 256);
        double err = 0;
        for (size_t i = 0; i < ref.size(); ++i) err += (back[i] - ref[i]) * double(back[i] - ref[i]);
        err = std::sqrt(err / double(ref.size())) / ref_rms;
        const int bits = int(8.0 * type_info(type).type_size / type_info(type).block_size);
        CHECK(err < (bits >= 8 ? 0.02 : 0.7));
    }
    CHECK(n_types >= 12);
}

TEST_CASE("make-model: weights have sane scales", "[make-model]") {
    SynthOptions o = opts(Arch::Qwen3Next, GgmlType::F32, 9);
    o.mtp = true;
    const ModelConfig c = config_for(o);
    const GgufFile f = parse(model_bytes(o));
    for (const auto& t : f.tensors()) {
        INFO(t.name);
        const auto v = f32_data(t);
        const std::string& n = t.name;
        if (n.find("norm.weight") != std::string::npos) {
            for (float x : v) CHECK(std::abs(x - 1.0f) < 0.15f);  // +1 already applied
        } else if (n.ends_with("ssm_a")) {
            for (float x : v) CHECK((x <= -1.0f && x >= -16.0f));
        } else if (n.ends_with("ssm_dt.bias")) {
            for (float x : v) {
                const double sp = std::log1p(std::exp(double(x)));  // softplus
                CHECK((sp > 0.99e-3 && sp < 1.01e-1));
            }
        } else if (n.ends_with("ssm_conv1d.weight")) {
            for (float x : v) CHECK(std::abs(x) <= 0.5f);
        } else if (n == "token_embd.weight") {
            CHECK(rms(v) == Approx(1.0).epsilon(0.05));
        } else if (n.find("attn_output") != std::string::npos || n.find("ffn_down") != std::string::npos ||
                   n.find("ssm_out") != std::string::npos) {
            CHECK(rms(v) == Approx(1.0 / std::sqrt(double(t.ne[0]) * 2.0 * double(c.n_block()))).epsilon(0.1));
        } else {
            CHECK(rms(v) == Approx(1.0 / std::sqrt(double(t.ne[0]))).epsilon(0.1));
        }
    }
}

TEST_CASE("make-model: writes a file the reader opens", "[make-model]") {
    const auto dir = std::filesystem::temp_directory_path() / "strata_test_make_model";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "tiny-llama.gguf").string();
    const SynthOptions o = opts(Arch::Llama, GgmlType::Q8_0, 11);
    make_writer(build_model(o)).write(path);
    const GgufFile f = GgufFile::open(path);
    const auto mem = model_bytes(o);
    CHECK(f.file_size() == mem.size());
    CHECK(f.get_string("general.architecture") == "llama");
    std::filesystem::remove_all(dir);
}

TEST_CASE("make-model: flag parsing", "[make-model][flags]") {
    const SynthOptions o = parse_flags({"--arch", "qwen3next", "--preset", "small", "--type", "Q4_k", "--seed",
                                        "17", "--out", "x.gguf", "--mtp", "--gdn-layout", "fused",
                                        "--vocab-size", "5000"});
    CHECK(o.arch == Arch::Qwen3Next);
    CHECK(o.preset == Preset::Small);
    CHECK(o.type == GgmlType::Q4_K);
    CHECK(o.seed == 17);
    CHECK(o.mtp);
    CHECK(o.gdn_layout == GdnLayout::Fused);
    CHECK(o.vocab_size == 5000);
    const SynthOptions d = parse_flags({"--arch=llama", "--out=y.gguf"});
    CHECK(d.preset == Preset::Tiny);
    CHECK(d.type == GgmlType::F16);
    CHECK(d.seed == 0);
    CHECK(d.vocab_size == 0);
    CHECK(d.layers == 0);
    const SynthOptions big = parse_flags({"--arch", "qwen3next", "--preset", "80b-a3b", "--layers", "4", "--out", "x"});
    CHECK(big.preset == Preset::A80B);
    CHECK(big.layers == 4);
    const ModelConfig bc = config_for(big);
    CHECK(bc.n_layer == 4);  // the preset's layer shape, four of them
    CHECK(bc.n_expert == 512);
    CHECK(bc.n_vocab == 151936);
    CHECK_THROWS_AS(config_for(parse_flags({"--arch", "llama", "--preset", "80b-a3b", "--out", "x"})), Error);
    CHECK_THROWS_AS(config_for(parse_flags({"--arch", "qwen35moe", "--preset", "80b-a3b", "--out", "x"})), Error);
    // the 1-bit grid formats are weight types too
    CHECK(parse_flags({"--arch", "llama", "--out", "x", "--type", "iq1_s"}).type == GgmlType::IQ1_S);
    CHECK(parse_flags({"--arch", "llama", "--out", "x", "--type", "IQ1_M"}).type == GgmlType::IQ1_M);

    using E = UsageError;
    CHECK_THROWS_AS(parse_flags({"--out", "x"}), E);                                   // no --arch
    CHECK_THROWS_AS(parse_flags({"--arch", "llama"}), E);                              // no --out
    CHECK_THROWS_AS(parse_flags({"--arch", "gpt5", "--out", "x"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--preset", "7b"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--type", "q9_9"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--type", "q8_k"}), E);  // not a weight type
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--seed", "-1"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--seed", "1x"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--mtp"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3", "--out", "x", "--gdn-layout", "split"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3next", "--out", "x", "--gdn-layout", "zigzag"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--vocab-size", "100"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--layers", "0"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--bogus"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "extra"}), E);
}
