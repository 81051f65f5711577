// Predictable models (make-model --mtp-agree, engine/synth/predictable.h): the maps
// are one cycle and a controlled disagreement, the stored weights make the main head
// follow f and the MTP head follow g in every weight type (checked by running the
// model), greedy generation follows f, and speculative decoding accepts each draft at
// about the requested rate with the output unchanged.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/cpu_ops.h"
#include "engine/core/flags.h"
#include "engine/generate.h"
#include "engine/split/split_runner.h"
#include "engine/synth/options.h"
#include "engine/synth/predictable.h"
#include "engine/synth/vocab.h"
#include "tests/model_helpers.h"

using namespace strata;
using namespace strata::synth;

namespace {

SynthOptions popts(double agree, GgmlType type = GgmlType::Q8_0, uint64_t seed = 3) {
    SynthOptions o;
    o.arch = synth::Arch::Qwen3Next;
    o.type = type;
    o.seed = seed;
    o.mtp = true;
    o.mtp_agree = agree;
    return o;
}

std::shared_ptr<const Model> load(const SynthOptions& o) { return Model::load(test::to_file(build_model(o))); }

SynthOptions parse_flags(std::vector<std::string> args) {
    args.insert(args.begin(), "make-model");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    Flags f = make_model_flags();
    f.parse(static_cast<int>(argv.size()), argv.data());
    return options_from_flags(f);
}

// Argmax and its margin over the runner-up.
std::pair<int32_t, float> top(const float* x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = static_cast<int32_t>(i);
    float second = -INFINITY;
    for (int64_t i = 0; i < n; ++i)
        if (i != best) second = std::max(second, x[i]);
    return {best, x[best] - second};
}

// n tokens of the orbit starting at cycle position `from`.
std::vector<int32_t> orbit(const PredictableMap& p, size_t from, size_t n) {
    std::vector<int32_t> t = {p.cycle[from % p.cycle.size()]};
    while (t.size() < n) t.push_back(p.next[static_cast<size_t>(t.back())]);
    return t;
}

GenerateStats gen(Runner& r, const Tokenizer& tok, const std::vector<int32_t>& prompt, int spec, int64_t n,
                  std::vector<int32_t>& out, std::optional<PipelineOptions> pipeline = std::nullopt) {
    GenerateOptions opt;
    opt.n_predict = n;
    opt.spec_draft = spec;
    opt.pipeline = pipeline;
    out.clear();
    return generate(r, tok, prompt, opt, [](std::string_view) { return true; }, &out);
}

}  // namespace

TEST_CASE("predictable: the maps are one cycle over the ordinary tokens and disagree on (1 - A) of them",
          "[predictable]") {
    const ModelConfig c = config_for(popts(0.5));
    const SynthVocab vocab = build_vocab(c.n_vocab);
    const auto n = static_cast<size_t>(256 + vocab.n_learned);
    std::vector<std::set<int32_t>> disagree;
    for (double a : {0.0, 0.3, 0.6, 0.9, 1.0}) {
        INFO("A = " << a);
        ModelConfig ca = c;
        ca.mtp_agree = a;
        const PredictableMap p = predictable_map(ca, 3);
        REQUIRE(p.cycle.size() == n);
        REQUIRE(p.next.size() == static_cast<size_t>(c.n_vocab));
        for (int32_t t : p.cycle) CHECK(vocab.types[static_cast<size_t>(t)] == kNormal);
        for (size_t t = n; t < p.next.size(); ++t) CHECK((p.next[t] == -1 && p.mtp_next[t] == -1));
        // One cycle: n steps from any token visit every cycle token once and come back.
        std::set<int32_t> seen;
        int32_t t = p.cycle[0];
        for (size_t i = 0; i < n; ++i) {
            seen.insert(t);
            t = p.next[static_cast<size_t>(t)];
        }
        CHECK(t == p.cycle[0]);
        CHECK(seen.size() == n);
        // g is a permutation of the cycle and differs from f exactly on B.
        std::set<int32_t> image, b;
        for (int32_t u : p.cycle) {
            image.insert(p.mtp_next[static_cast<size_t>(u)]);
            if (p.mtp_next[static_cast<size_t>(u)] != p.next[static_cast<size_t>(u)]) b.insert(u);
        }
        CHECK(image == seen);
        CHECK(static_cast<int64_t>(b.size()) == p.n_disagree);
        CHECK(p.n_disagree == std::llround((1.0 - a) * static_cast<double>(n)));
        disagree.push_back(b);
    }
    // A higher agreement only removes tokens from B.
    for (size_t i = 1; i < disagree.size(); ++i)
        CHECK(std::includes(disagree[i - 1].begin(), disagree[i - 1].end(), disagree[i].begin(), disagree[i].end()));
    // |B| = 1 cannot be deranged: it becomes 2.
    ModelConfig c1 = c;
    c1.mtp_agree = 1.0 - 1.0 / static_cast<double>(n);
    CHECK(predictable_map(c1, 3).n_disagree == 2);
    // The seed picks the cycle.
    CHECK(predictable_map(c, 4).cycle != predictable_map(c, 3).cycle);
}

TEST_CASE("predictable: same options give the same bytes; flags and errors", "[predictable]") {
    SynthOptions o = popts(0.6, GgmlType::Q8_0);
    o.threads = 1;
    const auto one = make_writer(build_model(o)).to_bytes();
    o.threads = 3;
    CHECK(make_writer(build_model(o)).to_bytes() == one);
    const GgufFile f = GgufFile::from_bytes(one.data(), one.size());
    const auto& head = f.tensor("blk.4.nextn.shared_head_head.weight");
    CHECK(head.type == GgmlType::Q8_0);
    CHECK(head.ne[0] == 256);
    CHECK(head.ne[1] == 1024);
    CHECK(f.get_string("general.description").find("predictable") != std::string::npos);

    const SynthOptions p = parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp-agree", "0.6"});
    CHECK(p.mtp);  // implied
    REQUIRE(p.mtp_agree);
    CHECK(*p.mtp_agree == 0.6);
    CHECK(!parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp"}).mtp_agree);
    using E = UsageError;
    CHECK_THROWS_AS(parse_flags({"--arch", "llama", "--out", "x", "--mtp-agree", "0.5"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp-agree", "1.5"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp-agree", "-0.1"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp-agree", "nan"}), E);
    CHECK_THROWS_AS(parse_flags({"--arch", "qwen3next", "--out", "x", "--mtp-agree", "half"}), E);
    // The library refuses an agreement without an MTP block.
    SynthOptions bad = popts(0.5);
    bad.mtp = false;
    CHECK_THROWS_AS(config_for(bad), Error);
}

namespace {

// Runs the model over a stretch of the orbit (all logits) and the MTP over the same
// pairs: every argmax must be the map's, with a clear margin. whole: the whole cycle.
void check_heads(GgmlType type, bool whole) {
    INFO(type_info(type).name);
    const SynthOptions o = popts(0.6, type);
    const PredictableMap p = predictable_map(config_for(o), o.seed);
    const auto m = load(o);
    const int64_t V = m->hp().n_vocab, E = m->hp().n_embd;
    const std::vector<int32_t> toks = orbit(p, 17, whole ? p.cycle.size() + 1 : 97);
    ThreadPool pool(2);
    CpuOps cpu_ops(pool);
    ForwardCtx ctx(cpu_ops, *m);
    SeqState s = m->new_state(ctx.ops, 1024, GgmlType::F16);
    const int64_t T = static_cast<int64_t>(toks.size()) - 1;  // the last token is only an MTP input
    std::vector<float> logits(static_cast<size_t>(T * V)), hidden(static_cast<size_t>(T * E));
    for (int64_t i = 0; i < T; i += 128) {
        const int64_t n = std::min<int64_t>(128, T - i);
        const Model::BatchItem bi{&s, std::span<const int32_t>(toks.data() + i, static_cast<size_t>(n)), true,
                                  hidden.data() + i * E};
        m->eval_batch(ctx, std::span<const Model::BatchItem>(&bi, 1), logits.data() + i * V);
    }
    float min_main = INFINITY, min_mtp = INFINITY;
    int64_t bad_main = 0, bad_mtp = 0;
    for (int64_t i = 0; i < T; ++i) {
        const auto [t, margin] = top(logits.data() + i * V, V);
        bad_main += t != p.next[static_cast<size_t>(toks[static_cast<size_t>(i)])];
        min_main = std::min(min_main, margin);
    }
    // MTP pair i: (hidden of toks[i], toks[i + 1]) drafts the token after toks[i + 1].
    std::vector<float> ml(static_cast<size_t>(T * V));
    for (int64_t i = 0; i < T; i += 128) {
        const int64_t n = std::min<int64_t>(128, T - i);
        m->mtp_forward(ctx, s, hidden.data() + i * E, toks.data() + i + 1, n, i, ml.data() + i * V, nullptr);
    }
    for (int64_t i = 0; i < T; ++i) {
        const auto [t, margin] = top(ml.data() + i * V, V);
        bad_mtp += t != p.mtp_next[static_cast<size_t>(toks[static_cast<size_t>(i + 1)])];
        min_mtp = std::min(min_mtp, margin);
    }
    INFO("smallest margin: main " << min_main << ", MTP " << min_mtp);
    CHECK(bad_main == 0);
    CHECK(bad_mtp == 0);
    // The right logit is about sqrt(n_embd) = 16, the others about N(0, 1).
    CHECK(min_main > 5.0f);
    CHECK(min_mtp > 5.0f);
}

// Greedy generation follows f; with K = 3 drafts the output is the same, and draft i
// is kept when the token it follows is outside B (a fraction A of the cycle) and so
// were the ones before it: the first draft of a window is kept with probability A,
// the next given it also A, and tokens/window = 1 + A + A^2 + A^3.
void check_acceptance(double a) {
    INFO("A = " << a);
    const SynthOptions o = popts(a);
    const PredictableMap p = predictable_map(config_for(o), o.seed);
    const auto m = load(o);
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    auto local = make_local_runner(m, 2, 512, GgmlType::F16);
    std::vector<int32_t> want, got;
    const int64_t n = 160;
    gen(*local, tok, prompt, 0, n, want);
    REQUIRE(static_cast<int64_t>(want.size()) == n);
    CHECK(want[0] == p.next[static_cast<size_t>(prompt.back())]);
    int64_t off = 0;
    for (size_t i = 1; i < want.size(); ++i) off += want[i] != p.next[static_cast<size_t>(want[i - 1])];
    CHECK(off == 0);

    const GenerateStats st = gen(*local, tok, prompt, 3, n, got);
    CHECK(got == want);
    const SpecStats& s = st.spec;
    REQUIRE(st.spec_draft == 3);
    const double per_window = 1 + a + a * a + a * a * a;
    INFO("acceptance " << s.acceptance() << ", first draft " << s.acceptance_at(0) << ", tokens/window "
                       << s.tokens_per_window() << " (expected " << per_window << ")");
    CHECK(std::abs(s.acceptance_at(0) - a) < 0.12);
    CHECK(std::abs(s.tokens_per_window() - per_window) < 0.35);
    if (s.accepted_at[0] > 20)
        CHECK(std::abs(static_cast<double>(s.accepted_at[1]) / static_cast<double>(s.accepted_at[0]) - a) < 0.15);
}

}  // namespace

TEST_CASE("predictable: the stored heads follow f and g over the whole cycle (q8_0)", "[predictable]") {
    check_heads(GgmlType::Q8_0, true);
}

TEST_CASE("predictable: the stored heads follow f and g (f16, bf16, q4_K)", "[predictable]") {
    for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_K}) check_heads(t, false);
}

TEST_CASE("predictable: the stored heads follow f and g (iq2_xxs: 2-bit grids without a zero)", "[predictable]") {
    check_heads(GgmlType::IQ2_XXS, false);
}

TEST_CASE("predictable: greedy follows f, speculation accepts each draft with probability A (0.3)",
          "[predictable][spec]") {
    check_acceptance(0.3);
}

TEST_CASE("predictable: greedy follows f, speculation accepts each draft with probability A (0.9)",
          "[predictable][spec]") {
    check_acceptance(0.9);
}

TEST_CASE("predictable: the same output and acceptance on a two-stage split, serial and pipelined",
          "[predictable][spec][split]") {
    const SynthOptions o = popts(0.6);
    const auto m = load(o);
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("Hello there", false);
    auto local = make_local_runner(m, 2, 512, GgmlType::F16);
    std::vector<int32_t> want, got;
    const GenerateStats ls = gen(*local, tok, prompt, 3, 120, want);
    const int64_t nl = m->hp().n_layer;
    const SplitPlan plan =
        plan_split("cpu:0,cpu:1", "auto", nl, layer_weight_bytes(m->file(), nl), head_weight_bytes(m->file()));
    for (int pipeline : {0, 2}) {
        INFO("pipeline windows " << pipeline);
        SplitConfig cfg;
        cfg.wait_ms = 10000;
        cfg.pipeline_windows = pipeline;
        auto split = make_split_runner(m, plan, 1, 512, GgmlType::F16, cfg);
        PipelineOptions always;  // every window that has room starts its successor early
        always.theta = 0;
        const GenerateStats ss = gen(*split, tok, prompt, 3, 120, got, always);
        CHECK(got == want);
        CHECK(ss.pipelined == (pipeline == 2));
        if (pipeline == 0) {
            CHECK(ss.spec.accepted == ls.spec.accepted);
            CHECK(ss.spec.windows == ls.spec.windows);
        } else {
            // The MTP is sure of every draft (p ~ 1), so nearly every window starts early;
            // one is kept when the window before kept its 3 drafts and the guess after
            // them: probability A^4.
            CHECK(ss.pipe.early >= ss.spec.windows - 3);
            CHECK(ss.pipe.hits + ss.pipe.misses == ss.pipe.early);
            const double hit_rate = static_cast<double>(ss.pipe.hits) / static_cast<double>(ss.pipe.early);
            CHECK(std::abs(hit_rate - std::pow(0.6, 4)) < 0.12);
            CHECK(std::abs(ss.spec.acceptance_at(0) - 0.6) < 0.12);
            // The default theta (0.25): the MTP's own probabilities (~1) would start every
            // window early, but 8 windows in the measured rates (~0.6^3 of windows kept
            // whole, 0.6 of guesses right: ~0.13) stop them.
            const GenerateStats sd = gen(*split, tok, prompt, 3, 120, got);
            CHECK(got == want);
            CHECK(sd.pipe.early <= 12);
            CHECK(sd.pipe.below_theta >= sd.spec.windows - 16);
        }
    }
}
