// Pipelined verify windows (--pipeline-windows 2, engine/speculative/pipeline.*, docs/spec.md):
// greedy output is byte-identical across the whole matrix of execution modes (no
// speculation, K = 1..4, 1/2/3 stages, serial and overlap, pipelined with every
// STRATA_PIPELINE_* variable flipped) on every hybrid architecture, with drafts forced so
// that early windows are both kept and rolled back; and the pipeline turns itself off
// where it does not apply.
#include <catch2/catch.hpp>

#include "engine/generate.h"
#include "engine/options.h"
#include "engine/split/split_runner.h"
#include "tests/generate_helpers.h"
#include "tests/model_helpers.h"

using namespace strata;
using test::gen;
using test::Run;

namespace {

std::shared_ptr<const Model> mtp_model(synth::Arch arch = synth::Arch::Qwen3Next) {
    return Model::load(test::to_file(test::tiny_model(arch, GgmlType::Q8_0, 7,
                                                      synth::GdnLayout::Split, /*mtp=*/true)));
}

std::unique_ptr<SplitRunner> split(std::shared_ptr<const Model> m, const char* devices, bool overlap, int pipeline,
                                   bool staged_copies = false) {
    SplitConfig cfg;
    cfg.staged_copies = staged_copies;
    cfg.overlap = overlap;
    cfg.wait_ms = 10000;
    cfg.pipeline_windows = pipeline;
    const int64_t n = m->hp().n_layer;
    const SplitPlan plan =
        plan_split(devices, "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file()));
    return make_split_runner(std::move(m), plan, 1, 160, GgmlType::F16, cfg);
}

}  // namespace

TEST_CASE("pipeline: greedy output is identical across every execution mode", "[spec][pipeline][greedy]") {
    // Every hybrid architecture with an MTP block: qwen35's tiled heads and dense FFN and
    // qwen35moe's router go through the same rollbacks and replays as qwen3next's.
    const auto arch = GENERATE(synth::Arch::Qwen3Next, synth::Arch::Qwen35, synth::Arch::Qwen35Moe);
    INFO(synth::arch_name(arch));
    auto m = mtp_model(arch);
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto local = make_local_runner(m, 2, 160, GgmlType::F16);
    const std::vector<int32_t> want = gen(*local, tok, prompt, 0, 48, {}).out;
    REQUIRE(want.size() == 48);  // no end of generation: every window shape below is reached
    const std::vector<int32_t> none;

    for (const std::vector<int32_t>* forced : {&none, &want}) {
        INFO((forced->empty() ? "the MTP's own drafts" : "forced drafts"));
        for (int k = 1; k <= 4; ++k) CHECK(gen(*local, tok, prompt, k, 48, *forced).out == want);
        for (bool overlap : {false, true}) {
            auto r2 = split(m, "cpu:0,cpu:1", overlap, 0);
            for (int k = 1; k <= 4; ++k) CHECK(gen(*r2, tok, prompt, k, 48, *forced).out == want);
        }
        auto r3 = split(m, "cpu:0,cpu:1,cpu:0", false, 0);
        CHECK(gen(*r3, tok, prompt, 0, 48, *forced).out == want);
        CHECK(gen(*r3, tok, prompt, 3, 48, *forced).out == want);

        auto pipe = split(m, "cpu:0,cpu:1", /*overlap=*/true, 2);
        REQUIRE(pipe->stage_pipe() != nullptr);
        CHECK_FALSE(pipe->overlap());  // the pipeline overlaps the stages its own way
        CHECK(gen(*pipe, tok, prompt, 0, 48, *forced).out == want);
        PipelineOptions always;
        always.theta = 0;
        for (int k = 1; k <= 4; ++k) {
            INFO("pipelined, K=" << k);
            const Run run = gen(*pipe, tok, prompt, k, 48, *forced, always);
            CHECK(run.out == want);
            CHECK(run.st.pipelined);
            const PipelineStats& p = run.st.pipe;
            CHECK(p.early == p.hits + p.misses);
            CHECK(p.early > 0);
            // (With K = 4 a window and its guess span five positions: one is always wrong.)
            if (!forced->empty() && k < 4) {
                CHECK(p.hits > 0);    // kept early windows ...
                CHECK(p.misses > 0);  // ... and rolled-back ones
            }
            if (forced->empty()) CHECK(p.hits == 0);  // a random MTP head never agrees
            // Rejected windows roll back from their kept inputs on both stages: stage 0
            // parks the window's log while the early window after it fills another.
            if (!forced->empty()) CHECK(p.log_rollbacks > 0);
            CHECK(p.replays == 0);
        }
        struct Variant {
            const char* name;
            PipelineOptions o;
        };
        std::vector<Variant> variants;
        auto add = [&](const char* name, auto&& edit) {
            PipelineOptions o = always;
            edit(o);
            variants.push_back({name, o});
        };
        add("THETA=2", [](PipelineOptions& o) { o.theta = 2; });
        add("THETA=0.5", [](PipelineOptions& o) { o.theta = 0.5; });
        add("FORCE_MISS=1", [](PipelineOptions& o) { o.force_miss = 1; });
        add("FORCE_MISS=2", [](PipelineOptions& o) { o.force_miss = 2; });
        add("FORCE_MISS=1 DOOM_SKIP=0", [](PipelineOptions& o) {
            o.force_miss = 1;
            o.doom_skip = false;
        });
        add("DOOM_SKIP=0", [](PipelineOptions& o) { o.doom_skip = false; });
        add("PRESTAGE=0", [](PipelineOptions& o) { o.prestage = false; });
        add("SNAP_OVERLAP=0", [](PipelineOptions& o) { o.snap_overlap = false; });
        add("THETA=0.5 SNAP_OVERLAP=0", [](PipelineOptions& o) {  // host windows and early ones, host copies
            o.theta = 0.5;
            o.snap_overlap = false;
        });
        add("PRESTAGE=0 SNAP_OVERLAP=0", [](PipelineOptions& o) {
            o.prestage = false;
            o.snap_overlap = false;
        });
        // The path a GPU takes (copies at the window's edges and the hand-in), on the CPU.
        auto staged = split(m, "cpu:0,cpu:1", false, 2, /*staged_copies=*/true);
        for (int k : {1, 3}) {
            INFO("pipelined, staged copies, K=" << k);
            CHECK(gen(*staged, tok, prompt, k, 48, *forced, always).out == want);
        }
        for (const Variant& v : variants) {
            INFO(v.name);
            const Run run = gen(*pipe, tok, prompt, 3, 48, *forced, v.o);
            CHECK(run.out == want);
            const PipelineStats& p = run.st.pipe;
            if (v.o.theta > 1) CHECK(p.early == 0);
            if (v.o.snap_overlap) {
                CHECK(p.replays == 0);  // cut or not, an early window leaves the log before it parked
                if (!forced->empty()) CHECK(p.log_rollbacks > 0);
            } else {
                CHECK(p.log_rollbacks == 0);  // the Verifier restores and replays
            }
            if (v.o.force_miss == 1) CHECK(p.hits == 0);
            if (v.o.force_miss > 0) {
                CHECK(p.early > 0);  // theta 0: a window starts early wherever one fits
                // Guesses that were right, rolled back by the variable (a random head's are never right).
                if (!forced->empty()) CHECK(p.forced > 0);
            }
        }
    }
}

namespace {

// 24 greedy tokens on a two-stage pipelined split at the default theta, K = 3, every draft
// drawn at probability p: the reference continuation (right) or the token after it
// (wrong). calls: how many times a chain drafted (the window's drafts, then its guess).
struct Drafted {
    std::vector<int32_t> out, want;
    GenerateStats st;
    int calls = 0;
};
Drafted gen_drafted(bool right, float p) {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto local = make_local_runner(m, 2, 160, GgmlType::F16);
    Drafted d;
    d.want = gen(*local, tok, prompt, 0, 24, {}).out;
    auto pipe = split(m, "cpu:0,cpu:1", false, 2);
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int32_t V = static_cast<int32_t>(m->hp().n_vocab);
    GenerateOptions opt;
    opt.n_predict = 24;
    opt.spec_draft = 3;
    opt.pipeline = PipelineOptions{};
    opt.spec_policy = SpecPolicyParams{};
    opt.spec_policy->timed = false;
    opt.spec_edit_draft = [&](int64_t pos, int k, Draft& draft) {
        ++d.calls;
        draft.tokens.clear();
        for (int j = 0; j < k && pos + 1 + j - P < static_cast<int64_t>(d.want.size()); ++j) {
            const int32_t t = d.want[static_cast<size_t>(pos + 1 + j - P)];
            draft.tokens.push_back(right ? t : (t + 1) % V);
        }
        draft.probs.assign(draft.tokens.size(), p);
    };
    d.st = generate(*pipe, tok, prompt, opt, [](std::string_view) { return true; }, &d.out);
    return d;
}

}  // namespace

TEST_CASE("pipeline: no guess is drafted where the window's own estimate is below theta", "[spec][pipeline]") {
    // Right drafts at probability 0.2: W's estimate is below theta (0.25) whatever the
    // guess's own first probability, so no early window can start.
    const Drafted d = gen_drafted(/*right=*/true, 0.2f);
    CHECK(d.out == d.want);
    REQUIRE(d.st.pipelined);
    CHECK(d.st.pipe.early == 0);
    CHECK(d.st.pipe.below_theta > 0);
    // One chain a window, the drafts: the guess's chain (a second call) never ran.
    CHECK(d.calls == d.st.spec.windows);
}

TEST_CASE("pipeline: early windows stop where the measured acceptance says they will not be kept",
          "[spec][pipeline]") {
    // Confidently wrong drafts (probability 0.9): by the drafts' own probabilities every
    // window would start its successor early.
    const Drafted d = gen_drafted(/*right=*/false, 0.9f);
    CHECK(d.out == d.want);
    REQUIRE(d.st.pipelined);
    INFO("windows " << d.st.spec.windows << ", early " << d.st.pipe.early << ", below theta " << d.st.pipe.below_theta);
    CHECK(d.st.pipe.hits == 0);
    CHECK(d.st.pipe.early <= 8);      // until 8 windows have measured the rate
    CHECK(d.st.pipe.below_theta >= 8);  // the windows after them, but the last few (no room for a guess)
}

TEST_CASE("pipeline: the early window's state is undone when generation stops", "[spec][pipeline]") {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("Once upon a time", false);
    auto local = make_local_runner(m, 1, 160, GgmlType::F16);
    const std::vector<int32_t> want = gen(*local, tok, prompt, 0, 30, {}).out;
    auto pipe = split(m, "cpu:0,cpu:1", false, 2);
    PipelineOptions always;
    always.theta = 0;
    // Every length: the last step ends with an early window in flight, kept or not, and
    // the next generation on the same runner is unaffected.
    for (int64_t n = 1; n <= 12; ++n) {
        INFO("n_predict " << n);
        const Run run = gen(*pipe, tok, prompt, 3, n, want, always);
        CHECK(run.out == std::vector<int32_t>(want.begin(), want.begin() + std::min<int64_t>(n, want.size())));
    }
}

TEST_CASE("pipeline: it turns itself off where it does not apply", "[spec][pipeline]") {
    auto m = mtp_model();
    CHECK(split(m, "cpu:0,cpu:1,cpu:2", false, 2)->stage_pipe() == nullptr);  // three stages
    CHECK(split(m, "cpu:0,cpu:0", false, 2)->stage_pipe() == nullptr);        // one device
    CHECK(split(m, "cpu:0,cpu:1", true, 0)->stage_pipe() == nullptr);         // not asked for
    auto on = split(m, "cpu:0,cpu:1", true, 2);
    REQUIRE(on->stage_pipe() != nullptr);
    CHECK(on->stage_pipe()->second_set_bytes() > 0);
    CHECK(on->describe().find("pipelined") != std::string::npos);

    // No drafter for this request (speculation off): it decodes plainly through eval.
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("Hello", false);
    const Run run = gen(*on, tok, prompt, 0, 8, {});
    CHECK_FALSE(run.st.pipelined);
    CHECK(run.st.spec_draft == 0);
}

TEST_CASE("pipeline: --split auto balances what a window reads on each stage", "[spec][pipeline][plan]") {
    synth::ModelConfig c = synth::make_config(synth::Arch::Qwen3Next, synth::Preset::Tiny);
    c.n_layer = 8;
    c.mtp = true;
    auto m = Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 3)));
    const GgufFile& f = m->file();
    const int64_t n = c.n_layer;
    // One row reads one token's share of the experts (decode_weight_bytes, but the head);
    // a window's rows read more of them, all of them as the rows grow.
    const std::vector<uint64_t> one = layer_window_bytes(f, n, c.n_expert, c.n_expert_used, 1);
    const std::vector<uint64_t> four = layer_window_bytes(f, n, c.n_expert, c.n_expert_used, 4);
    const std::vector<uint64_t> many = layer_window_bytes(f, n, c.n_expert, c.n_expert_used, 4096);
    const std::vector<uint64_t> held = layer_weight_bytes(f, n);
    uint64_t sum1 = 0;
    for (int64_t i = 0; i < n; ++i) {
        const auto l = static_cast<size_t>(i);
        sum1 += one[l];
        CHECK(one[l] < four[l]);
        CHECK(four[l] < held[l]);
        CHECK(static_cast<double>(many[l]) >= 0.999 * static_cast<double>(held[l]));
    }
    const double want1 = static_cast<double>(decode_weight_bytes(f, n, c.n_expert, c.n_expert_used) - head_weight_bytes(f));
    CHECK(std::abs(static_cast<double>(sum1) - want1) <= static_cast<double>(n));
    // The last stage's extra: the head, k + 1 MTP block reads, k + 2 draft heads.
    CHECK(PipelinedDecoder::last_stage_bytes(1000, 100, 256, 1024, 3) == 1000 + 4 * 100 + 5 * 250);
    CHECK(PipelinedDecoder::last_stage_bytes(1000, 100, 4096, 1024, 1) == 1000 + 2 * 100 + 3 * 1000);

    RunnerOptions o;
    o.devices = "cpu:0,cpu:1";
    const SplitPlan held_plan = runner_plan(*m, o);
    o.pipeline_windows = 2;
    const SplitPlan pipe_plan = runner_plan(*m, o);
    INFO(held_plan.describe() << " / " << pipe_plan.describe());
    REQUIRE(pipe_plan.stages.size() == 2);
    // The head and the draft chain weigh on the last stage: it gets fewer layers.
    CHECK(pipe_plan.stages[1].l1 - pipe_plan.stages[1].l0 < held_plan.stages[1].l1 - held_plan.stages[1].l0);
    // Where the pipeline does not run (one device twice), on GPUs (their memory is their
    // own), or where the ranges are given, the split is the usual one.
    for (const char* devs : {"cpu:0,cpu:0", "cuda:0,cuda:1", "cpu:0,hip:0"}) {
        INFO(devs);
        o.devices = devs;
        CHECK(runner_plan(*m, o).describe() == plan_split(devs, "auto", n, held, head_weight_bytes(f)).describe());
    }
    o.devices = "cpu:0,cpu:1";
    o.split = "0-3,4-7";
    CHECK(runner_plan(*m, o).describe() == "cpu:0 layers 0-3 | cpu:1 layers 4-7");
}

TEST_CASE("pipeline: sampled output is reproducible for a seed", "[spec][pipeline][stochastic]") {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    auto pipe = split(m, "cpu:0,cpu:1", false, 2);
    PipelineOptions always;
    always.theta = 0;
    GenerateOptions opt;
    opt.n_predict = 24;
    opt.spec_draft = 2;
    opt.pipeline = always;
    opt.sampling.temperature = 1.2f;
    opt.sampling.top_k = 8;
    opt.sampling.seed = 42;
    std::vector<int32_t> a, b;
    const GenerateStats st = generate(*pipe, tok, prompt, opt, [](std::string_view) { return true; }, &a);
    generate(*pipe, tok, prompt, opt, [](std::string_view) { return true; }, &b);
    CHECK(st.pipelined);
    CHECK(a == b);
    CHECK(!a.empty());
    // The same tokens as plain decoding and serial windows: every position's draw is
    // the sampler's own, whichever mode produces it.
    auto local = make_local_runner(m, 2, 128, GgmlType::F16);
    for (const int k : {0, 1, 3}) {
        GenerateOptions o = opt;
        o.spec_draft = k;
        for (Runner* r : {static_cast<Runner*>(local.get()), static_cast<Runner*>(pipe.get())}) {
            std::vector<int32_t> c;
            generate(*r, tok, prompt, o, [](std::string_view) { return true; }, &c);
            INFO("K=" << k << " " << r->describe());
            CHECK(c == a);
        }
    }
}

TEST_CASE("pipeline: a hand-off timeout fails the request and the runner recovers", "[spec][pipeline][handoff]") {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    // theta 0: the dropped window is queued on the stages' threads; theta 2: no window
    // starts early, so every one runs on the host's thread (PipelinedDecoder::run_here).
    const double theta = GENERATE(0.0, 2.0);
    INFO("theta " << theta);
    SplitConfig cfg;
    cfg.wait_ms = 200;
    cfg.pipeline_windows = 2;
    // Window ids: the prompt's windows (5 tokens each), then per step the verified window
    // and, at theta 0, the early one (every early window misses with this MTP head): the
    // second verified window's flag at theta 0, the third's at theta 2.
    const int64_t prompt_windows = (static_cast<int64_t>(prompt.size()) + 4) / 5;
    cfg.drop_window = prompt_windows + 3;
    const int64_t n = m->hp().n_layer;
    auto r = make_split_runner(m, plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n),
                                             head_weight_bytes(m->file())),
                               1, 160, GgmlType::F16, cfg);
    PipelineOptions popt;
    popt.theta = theta;
    auto local = make_local_runner(m, 1, 160, GgmlType::F16);
    const std::vector<int32_t> want = gen(*local, tok, prompt, 0, 20, {}).out;
    CHECK_THROWS_AS(gen(*r, tok, prompt, 3, 20, {}, popt), HandoffError);
    CHECK(r->stats().handoff_timeouts >= 1);
    // The window ids have moved past the dropped one: the next request runs whole.
    const Run again = gen(*r, tok, prompt, 3, 20, {}, popt);
    CHECK(again.out == want);
    CHECK(again.st.pipelined);
    if (theta > 1) CHECK(again.st.pipe.early == 0);
}

TEST_CASE("spec: the default pauses a drafter that is not kept", "[spec][auto]") {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto local = make_local_runner(m, 1, 160, GgmlType::F16);
    const Run plain = gen(*local, tok, prompt, 0, 48, {});
    REQUIRE(plain.out.size() == 48);
    const int64_t backoff = SpecPolicyParams{}.backoff_first;
    REQUIRE(backoff > 48);
    // A random MTP head never agrees: two probes (plain steps with the drafter's guess)
    // miss and the default pauses for longer than the request, without a single verify
    // window; the text is the same.
    const Run dflt = gen(*local, tok, prompt, -1, 48, {});
    CHECK(dflt.out == plain.out);
    CHECK(dflt.st.spec_draft == 3);
    CHECK(dflt.st.spec.windows == 0);
    CHECK(dflt.st.spec_pauses == 1);
    CHECK(dflt.st.spec_plain_steps == 47);
    // An explicit K always speculates.
    const Run k3 = gen(*local, tok, prompt, 3, 48, {});
    CHECK(k3.out == plain.out);
    CHECK(k3.st.spec.windows == 47);
    CHECK(k3.st.spec_plain_steps == 0);
    // A drafter that agrees keeps the default on (forced drafts: most windows kept): one
    // kept probe, then full-K windows.
    const Run agree = gen(*local, tok, prompt, -1, 48, plain.out);
    CHECK(agree.out == plain.out);
    CHECK(agree.st.spec_pauses == 0);
    CHECK(agree.st.spec_plain_steps <= 3);
    CHECK(agree.st.spec.tokens_per_window() >= 2);
    CHECK(1 + agree.st.spec.windows + agree.st.spec.accepted + agree.st.spec_plain_steps == 48);
    // Also through the pipelined decoder: it finishes (no early window left on stage 0)
    // before the plain steps.
    auto pipe = split(m, "cpu:0,cpu:1", false, 2);
    PipelineOptions always;
    always.theta = 0;
    const Run p = gen(*pipe, tok, prompt, -1, 48, {}, always);
    CHECK(p.out == plain.out);
    CHECK(p.st.spec.windows == 0);
    CHECK(p.st.spec_pauses == 1);
}

TEST_CASE("spec: greedy output is unchanged while the default pauses and resumes mid-request", "[spec][auto][greedy]") {
    // Forced drafts that are wrong, then right, then wrong, then right again: the default
    // probes, pauses, retries, drafts at full K, pauses again and comes back, on every
    // runner; the text is plain decoding's, byte for byte, and the stepping adds up.
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto local = make_local_runner(m, 1, 160, GgmlType::F16);
    const int64_t n = 100;
    const std::vector<int32_t> want = gen(*local, tok, prompt, 0, n, {}).out;
    REQUIRE(static_cast<int64_t>(want.size()) == n);
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int32_t V = static_cast<int32_t>(m->hp().n_vocab);
    // Output index i is right in [10, 40) and [60, n) (every seventh of those wrong too).
    const auto right = [](int64_t i) { return ((i >= 10 && i < 40) || i >= 60) && i % 7 != 3; };
    SpecPolicyParams prm;
    prm.backoff_first = 4;
    prm.backoff_max = 8;
    prm.timed = false;  // the counts below by acceptance alone
    std::unique_ptr<Runner> s0 = split(m, "cpu:0,cpu:1", false, 0), s1 = split(m, "cpu:0,cpu:1", true, 0),
                            sp = split(m, "cpu:0,cpu:1", false, 2);
    struct Case {
        const char* name;
        Runner* r;
        std::optional<PipelineOptions> po;
    };
    PipelineOptions always, never;
    always.theta = 0;
    never.theta = 2;
    const std::vector<Case> cases = {{"local", local.get(), std::nullopt},
                                     {"split serial", s0.get(), std::nullopt},
                                     {"split overlap", s1.get(), std::nullopt},
                                     {"pipelined, theta 0", sp.get(), always},
                                     {"pipelined, theta 2", sp.get(), never}};
    for (const Case& c : cases) {
        INFO(c.name);
        GenerateOptions opt;
        opt.n_predict = n;
        opt.n_batch = 5;
        opt.spec_draft = -1;
        opt.pipeline = c.po;
        opt.spec_policy = prm;
        opt.spec_edit_draft = [&](int64_t pos, int k, Draft& d) {
            d.tokens.clear();
            for (int j = 0; j < k; ++j) {
                const int64_t at = pos + 1 + j - P;  // the token at position p is want[p - P]
                if (at >= n) break;
                d.tokens.push_back(right(at) ? want[static_cast<size_t>(at)] : (want[static_cast<size_t>(at)] + 1) % V);
            }
            d.probs.assign(d.tokens.size(), 0.9f);
        };
        std::vector<int32_t> out;
        const GenerateStats st = generate(*c.r, tok, prompt, opt, [](std::string_view) { return true; }, &out);
        CHECK(out == want);
        CHECK(st.spec_pauses >= 2);          // paused in both wrong stretches ...
        CHECK(st.spec.accepted > 20);        // ... and drafted (kept) in both right ones
        CHECK(st.spec.accepted_at[2] > 0);   // at full K
        CHECK(st.spec_plain_steps >= 10);
        CHECK(1 + st.spec.windows + st.spec.accepted + st.spec_plain_steps == n);
        // Seeded sampling is reproducible through the pauses (the policy reads acceptance only).
        GenerateOptions so = opt;
        so.sampling.temperature = 0.8f;
        so.sampling.seed = 11;
        std::vector<int32_t> a, b;
        const GenerateStats sa = generate(*c.r, tok, prompt, so, [](std::string_view) { return true; }, &a);
        generate(*c.r, tok, prompt, so, [](std::string_view) { return true; }, &b);
        CHECK(a == b);
        CHECK(sa.spec_pauses >= 1);
    }
}

TEST_CASE("pipeline: the default's K walks between pipelined windows, and the text stays plain decoding's",
          "[spec][pipeline][auto][greedy]") {
    // Every forced draft right. A timed greedy request's default is built for the walk's
    // range (K up to 8) on a pipelined split too; which Ks its windows take depends on the
    // clock (on this tiny model a window can look dearer than the tokens it keeps, and the
    // default then goes back to probes, whose real MTP guesses miss: CI's loaded machine
    // ran no window of K = 4 where an idle one ran ten), so only what holds whatever
    // the clock says is checked. tests/test_spec_policy.cpp checks the walk itself, and
    // scripts/stress-pipeline.sh runs it between real pipelined windows.
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto local = make_local_runner(m, 1, 160, GgmlType::F16);
    const int64_t n = 90;
    const std::vector<int32_t> want = gen(*local, tok, prompt, 0, n, {}).out;
    REQUIRE(static_cast<int64_t>(want.size()) == n);
    const int64_t P = static_cast<int64_t>(prompt.size());
    auto sp = split(m, "cpu:0,cpu:1", false, 2);
    PipelineOptions always;
    always.theta = 0;
    GenerateOptions opt;
    opt.n_predict = n;
    opt.spec_draft = -1;
    opt.pipeline = always;
    opt.spec_edit_draft = [&](int64_t pos, int k, Draft& d) {
        d.tokens.clear();
        for (int j = 0; j < k && pos + 1 + j - P < n; ++j) d.tokens.push_back(want[static_cast<size_t>(pos + 1 + j - P)]);
        d.probs.assign(d.tokens.size(), 0.9f);
    };
    std::vector<int32_t> out;
    const GenerateStats st = generate(*sp, tok, prompt, opt, [](std::string_view) { return true; }, &out);
    CHECK(out == want);
    CHECK(st.pipelined);
    CHECK(st.spec.drafted_at.size() == static_cast<size_t>(kAdaptiveMaxSpecK));  // built for the walk (K = 3 before it)
    CHECK(st.spec_k_last >= 1);
    CHECK(st.spec_k_last <= kAdaptiveMaxSpecK);
    CHECK(1 + st.spec.windows + st.spec.accepted + st.spec_plain_steps == n);
}
