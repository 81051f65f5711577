// Golden end-to-end tests: exact greedy output of tiny synthetic models of every
// architecture, generated through the tokenizer, the forward pass and the sampler.
// A change here means the engine computes something different: find out why before
// updating the ids.
#include <catch2/catch.hpp>

#include <sstream>

#include "engine/generate.h"
#include "engine/synth/model_writer.h"
#include "engine/split/split_runner.h"

using namespace strata;

namespace {

std::vector<int32_t> greedy(synth::Arch arch, GgmlType type, bool mtp, synth::GdnLayout layout, int threads) {
    synth::SynthOptions o;
    o.arch = arch;
    o.type = type;
    o.seed = 11;
    o.mtp = mtp;
    o.gdn_layout = layout;
    const auto bytes = synth::make_writer(synth::build_model(o)).to_bytes();
    std::shared_ptr<const Model> model = Model::load(GgufFile::from_bytes(bytes.data(), bytes.size(), "golden.gguf"));
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    const auto prompt = tok.encode("The quick brown fox", false);
    auto runner = make_local_runner(model, threads, 64, GgmlType::F16);
    GenerateOptions opt;
    opt.n_predict = 16;
    opt.n_batch = 4;
    std::vector<int32_t> out;
    generate(*runner, tok, prompt, opt, [](std::string_view) { return true; }, &out);
    return out;
}

std::string show(const std::vector<int32_t>& v) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
    return s.str();
}

}  // namespace

TEST_CASE("golden: greedy output of tiny models is pinned", "[golden]") {
    struct Case {
        const char* name;
        synth::Arch arch;
        GgmlType type;
        bool mtp;
        synth::GdnLayout layout;
        std::vector<int32_t> want;
    };
    const std::vector<Case> cases = {
        {"llama q8_0", synth::Arch::Llama, GgmlType::Q8_0, false, synth::GdnLayout::Split,
         {543, 620, 522, 937, 364, 54, 300, 260, 333, 309, 75, 128, 558, 794, 117, 1011}},
        {"qwen3 q8_0", synth::Arch::Qwen3, GgmlType::Q8_0, false, synth::GdnLayout::Split,
         {543, 620, 522, 698, 502, 476, 946, 845, 760, 309, 75, 128, 558, 380, 260, 333}},
        {"qwen3next q8_0", synth::Arch::Qwen3Next, GgmlType::Q8_0, false, synth::GdnLayout::Split,
         {96, 353, 356, 699, 510, 95, 73, 89, 540, 438, 241, 439, 10, 162, 520, 216}},
        {"qwen3next q4_K fused +mtp", synth::Arch::Qwen3Next, GgmlType::Q4_K, true, synth::GdnLayout::Fused,
         {1002, 137, 588, 58, 297, 353, 626, 1020, 115, 143, 696, 531, 742, 788, 997, 261}},
    };
    for (const Case& c : cases) {
        const auto got = greedy(c.arch, c.type, c.mtp, c.layout, 2);
        INFO(c.name << ": got {" << show(got) << "}");
        CHECK(got == c.want);
        CHECK(greedy(c.arch, c.type, c.mtp, c.layout, 1) == got);  // thread count never matters
    }
}
