// Whole models on the GPU backend, wherever one is present (a CPU HIP runtime here, a real
// GPU when lent; each case passes with a warning when none is): logits close to the CPU
// backend's on f32 files, and greedy results bit-identical across the GPU's own modes
// (one stage, two stages on one device with the mapped hand-off, a GPU stage beside a
// CPU stage), since the same kernels run in the same order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/backend/device.h"
#include "engine/backend/handoff.h"
#include "engine/backend/ops.h"
#include "engine/serve/prompt_store.h"
#include "engine/split/plan.h"
#include "engine/split/split_runner.h"
#include "engine/split/stage_placement.h"
#include "tests/generate_helpers.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

std::string gpu0() { return std::string(gpu_backend()) + ":0"; }

bool have_gpu() {
    if (gpu_device_count() > 0) return true;
    WARN("no GPU device: skipped");
    return false;
}

// A split for the determinism matrix: serial, overlap or pipelined windows; two stages
// may share the GPU (each has its own stream: the test switch of SplitConfig).
std::unique_ptr<Runner> split_modes(std::shared_ptr<const Model> m, const std::string& devs, bool overlap,
                                    int pipeline, int64_t wait_ms = 60000, int64_t drop_window = 0) {
    const int64_t n = m->hp().n_layer;
    SplitConfig cfg;
    cfg.wait_ms = wait_ms;
    cfg.drop_window = drop_window;
    cfg.host_timeout_ms = 0;
    cfg.overlap = overlap;
    cfg.pipeline_windows = pipeline;
    cfg.shared_device_overlap = true;
    return make_split_runner(m, plan_split(devs, "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file())),
                             1, 160, GgmlType::F16, cfg);
}

// Logits of a short prompt (every position) and of two decode steps.
std::vector<float> run_windows(Runner& r) { return test::run_windows(r, {5, 9, 2, 77, 31}, 2); }

std::unique_ptr<Runner> runner(std::shared_ptr<const Model> m, const std::string& devs, const std::string& split) {
    const int64_t n = m->hp().n_layer;
    SplitConfig cfg;
    cfg.wait_ms = 60000;
    cfg.host_timeout_ms = 0;  // a CPU HIP runtime is slow; no watchdog in a correctness test
    return make_split_runner(m, plan_split(devs, split, n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file())),
                             1, 32, GgmlType::F16, cfg);
}

std::shared_ptr<const Model> tiny(synth::Arch arch, GgmlType type) {
    synth::ModelConfig c = synth::make_config(arch, synth::Preset::Tiny);
    c.n_layer = 2;
    c.mtp = c.hybrid();
    return Model::load(test::to_file(synth::build_model(c, type, 4)));
}

// got within 1e-3 of want's largest magnitude (at least 1): a GPU's rounding, not a wrong op.
void check_close(const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    double err = 0, mag = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, double(std::fabs(got[i] - want[i])));
        mag = std::max(mag, double(std::fabs(want[i])));
    }
    INFO("max |diff| " << err << " of max |logit| " << mag);
    CHECK(err <= 1e-3 * std::max(1.0, mag));
}

}  // namespace

TEST_CASE("gpu: logits of f32 models within 1e-3 of the CPU backend", "[gpu][model]") {
    if (!have_gpu()) return;
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35,
                      synth::Arch::Qwen35Moe}) {
        auto m = tiny(arch, GgmlType::F32);
        const auto want = run_windows(*make_local_runner(m, 1, 32, GgmlType::F16));
        const auto got = run_windows(*runner(m, gpu0(), "auto"));
        INFO(synth::arch_name(arch));
        check_close(got, want);
    }
}

// Quantized files: both backends quantize the activations to the same two int8 digits
// (kernels/cpu/act_quant.h, matmul_q.cu) and sum integer products per block, so the
// logits differ only by the order of float sums.
TEST_CASE("gpu: logits of quantized models within 1e-3 of the CPU backend", "[gpu][model]") {
    if (!have_gpu()) return;
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS})
        for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen35Moe}) {
            auto m = tiny(arch, type);
            const auto want = run_windows(*make_local_runner(m, 1, 32, GgmlType::F16));
            const auto got = run_windows(*runner(m, gpu0(), "auto"));
            INFO(synth::arch_name(arch) << " " << type_info(type).name);
            check_close(got, want);
        }
}

TEST_CASE("gpu: logits bit-identical across the GPU's placements", "[gpu][model][determinism]") {
    if (!have_gpu()) return;
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next}) {
        auto m = tiny(arch, GgmlType::Q8_0);
        const auto want = run_windows(*runner(m, gpu0(), "auto"));
        for (const std::string& devs : {gpu0() + "," + gpu0(), gpu0() + ",cpu:0"}) {
            auto r = runner(m, devs, "0-0,1-1");
            INFO(synth::arch_name(arch) << " " << r->describe());
            const auto got = run_windows(*r);
            if (devs.find("cpu") == std::string::npos) {
                CHECK(got == want);  // the same kernels in the same order
            } else {
                // A CPU stage: the CPU's kernels for its layers, close but not the same bits.
                double err = 0, mag = 0;
                for (size_t i = 0; i < want.size(); ++i) {
                    err = std::max(err, double(std::fabs(got[i] - want[i])));
                    mag = std::max(mag, double(std::fabs(want[i])));
                }
                CHECK(err <= 2e-2 * std::max(1.0, mag));
            }
        }
    }
}

TEST_CASE("gpu: streamed layers give the logits of resident ones, within the budget", "[gpu][model][placement]") {
    if (!have_gpu()) return;
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next, synth::Arch::Qwen35Moe}) {
        synth::ModelConfig c = synth::make_config(arch, synth::Preset::Tiny);
        c.n_layer = 4;
        c.mtp = c.hybrid();
        std::shared_ptr<const Model> m = Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 4)));
        const int64_t n = m->hp().n_layer;
        const SplitPlan plan = plan_split(gpu0(), "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file()));
        SplitConfig cfg;
        cfg.wait_ms = 60000;
        cfg.host_timeout_ms = 0;
        const auto want = run_windows(*make_split_runner(m, plan, 1, 32, GgmlType::F16, cfg));
        cfg.stream_layers = true;
        cfg.max_rows = 8;
        PlacementRequest r;
        {
            auto dev = open_device(gpu0(), 1, -1);
            r = stage_request(*m, dev->ops(), plan.stages[0], true, true, cfg, 32, GgmlType::F16);
        }
        for (int depth : {0, 1}) {
            cfg.prefetch_depth = depth;
            // Every layer streamed; the reserve is room for what the backend allocates beside
            // the planner's count (the experts' pointer tables: a few KiB). Its op scratch
            // (tens of KiB here) is in the count (Ops::scratch_bytes).
            cfg.vram_reserve = int64_t{16} << 10;
            const int64_t budget = budget_for(r, 0, depth) + cfg.vram_reserve;
            cfg.budgets = {{gpu0(), budget}};
            auto run = make_split_runner(m, plan, 1, 32, GgmlType::F16, cfg);
            INFO(synth::arch_name(arch) << ": " << run->describe());
            CHECK(run_windows(*run) == want);
            const Runner::Stats st = run->runner_stats();
            CHECK(st.device_peak_bytes <= budget);
            CHECK(st.stream_copies > 0);
            if (depth == 1) CHECK(st.prefetch_hits > 0);
        }
    }
}

TEST_CASE("gpu: experts in host memory with the device's cache of hot ones", "[gpu][model][placement][moe]") {
    if (!have_gpu()) return;
    for (auto arch : {synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next}) {
        auto m = tiny(arch, GgmlType::F32);
        const auto want = run_windows(*make_local_runner(m, 1, 32, GgmlType::F16));
        const int64_t n = m->hp().n_layer;
        const SplitPlan plan = plan_split(gpu0(), "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file()));
        SplitConfig cfg;
        cfg.wait_ms = 60000;
        cfg.host_timeout_ms = 0;
        cfg.n_cpu_moe = -1;
        cfg.moe_cache_bytes = size_t{16} << 20;
        cfg.adapt_every = 1;
        auto r = make_split_runner(m, plan, 1, 32, GgmlType::F16, cfg);
        const auto got = run_windows(*r);
        INFO(synth::arch_name(arch));
        check_close(got, want);
        const Runner::Stats st = r->runner_stats();
        CHECK(st.expert_rows_host > 0);
        CHECK(st.expert_rows_device > 0);  // the cache's experts ran on the GPU
    }
}

TEST_CASE("gpu: a state saved to host memory and put back gives the cold run's logits", "[gpu][model][prompt_store]") {
    // The prompt cache's host level (PromptStore) on the GPU: its copies go through
    // Ops::to_host / to_device of every stage's device (engine/split/state_copy.cpp).
    if (!have_gpu()) return;
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next}) {
        auto m = tiny(arch, GgmlType::Q8_0);
        for (const std::string& devs : {gpu0(), gpu0() + ",cpu:0"}) {
            auto r = runner(m, devs, devs == gpu0() ? "auto" : "0-0,1-1");
            INFO(synth::arch_name(arch) << " " << r->describe());
            const std::vector<int32_t> a = {5, 9, 2, 77, 31, 8, 14}, b = {40, 41, 3};
            const auto V = static_cast<size_t>(m->hp().n_vocab);
            const auto feed = [&](int seq, std::span<const int32_t> toks) {
                std::vector<float> logits(V);
                const Runner::Item it{seq, toks, false};
                r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
                return logits;
            };
            const int cold = r->new_sequence();
            feed(cold, a);
            const std::vector<float> want = feed(cold, b);
            PromptStore store(64u << 20, r->kv_bytes_per_pos(), r->recurrent_bytes(), 4);
            const int warm = r->new_sequence();
            feed(warm, a);
            REQUIRE(store.save(*r, warm, a));
            r->reset_sequence(warm);
            const PromptStore::Match hit = store.match(a, static_cast<int64_t>(a.size()));
            REQUIRE(hit.n == static_cast<int64_t>(a.size()));
            store.load(*r, warm, hit);
            CHECK(r->n_past(warm) == static_cast<int64_t>(a.size()));
            CHECK(feed(warm, b) == want);
        }
    }
}

// The wait on the device measures its limit with the GPU's clock: a window never
// published fails after STRATA_SPLIT_WAIT_MS (+-10%), with the timeout in the error word.
TEST_CASE("gpu: a hand-off wait on the device times out after its limit", "[gpu][handoff]") {
    if (!have_gpu()) return;
    auto dev = open_device(gpu0(), 1, -1);
    Ops& ops = dev->ops();
    const int64_t E = 16, wait_ms = 400;
    Handoff h(*dev, static_cast<size_t>(E));
    const Buffer x = ops.alloc(E * sizeof(float));
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<Tensor> in = ops.handoff_wait(h, 3, wait_ms, Tensor::f32(static_cast<float*>(x.data()), E, 1));
    REQUIRE(in.has_value());  // a GPU waits on the device
    CHECK(ops.hand_in_failed(h));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CHECK(h.failure() == Handoff::Wait::TimedOut);
    INFO("failed after " << ms << " ms");
    CHECK(ms >= 0.9 * wait_ms);
    CHECK(ms <= 1.1 * wait_ms);
}

// The determinism matrix on the GPU backend itself: greedy text bit-identical across
// speculation K = 1..4, a split on the card, overlap and pipelined windows (the same
// kernels in the same order), with drafts forced so that windows are kept, cut short and
// rolled back. A placement with a CPU stage has its own reference (the CPU's kernels for
// its layers). Two stages on one card in overlap or pipelined mode: the reader's stream
// waits for the writer's publish before its wait kernel (Handoff::shared_device), so
// these rows run on any runtime (they timed out on a card before; a CPU HIP runtime runs
// streams one after another).
TEST_CASE("gpu: greedy text bit-identical across speculation, overlap and pipelined windows",
          "[gpu][model][determinism][spec]") {
    if (!have_gpu()) return;
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7,
                                                                                synth::GdnLayout::Split, /*mtp=*/true)));
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    const int64_t n = 20;
    PipelineOptions always;
    always.theta = 0;  // an early window wherever one fits

    const std::string g = gpu0();
    std::vector<int32_t> gpu_want;
    for (const std::string& devs : {g, g + "," + g, "cpu:0," + g, g + ",cpu:0"}) {
        const bool split = devs.find(',') != std::string::npos;
        const bool mixed = devs.find("cpu") != std::string::npos;
        auto serial = split ? split_modes(m, devs, false, 0) : runner(m, devs, "auto");
        INFO(serial->describe());
        const std::vector<int32_t> want = test::gen(*serial, tok, prompt, 0, n, {}).out;
        REQUIRE(want.size() == static_cast<size_t>(n));
        if (!mixed) {
            if (gpu_want.empty()) gpu_want = want;
            CHECK(want == gpu_want);  // one stage or two on the card: the same kernels, the same order
        }
        for (int k = 1; k <= 4; ++k) {
            INFO("serial windows, K=" << k);
            CHECK(test::gen(*serial, tok, prompt, k, n, want).out == want);
        }
        if (!split) continue;
        auto overlap = split_modes(m, devs, true, 0);
        REQUIRE(dynamic_cast<SplitRunner&>(*overlap).overlap());
        for (int k : {0, 1, 3}) {
            INFO("overlap, K=" << k);
            CHECK(test::gen(*overlap, tok, prompt, k, n, k ? want : std::vector<int32_t>{}).out == want);
        }
        auto pipe = split_modes(m, devs, false, 2);
        REQUIRE(dynamic_cast<SplitRunner&>(*pipe).stage_pipe() != nullptr);
        for (int k = 1; k <= 4; ++k) {
            INFO("pipelined windows, K=" << k);
            const test::Run run = test::gen(*pipe, tok, prompt, k, n, want, always);
            CHECK(run.out == want);
            CHECK(run.st.pipelined);
            if (k < 4) {
                CHECK(run.st.pipe.hits > 0);    // kept early windows ...
                CHECK(run.st.pipe.misses > 0);  // ... and rolled-back ones
            }
        }
    }
}

// A draft vocabulary on the GPU: the MTP head's first rows are a prefix view of the
// card's copy, so the logits of the first D ids are the whole head's, bit for bit (the
// same kernel per row), and the rest -inf.
TEST_CASE("gpu: the MTP head ranks a draft vocabulary as a prefix of its rows", "[gpu][model][spec][draft-vocab]") {
    if (!have_gpu()) return;
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7,
                                                                                synth::GdnLayout::Split, /*mtp=*/true)));
    const int64_t V = m->hp().n_vocab, E = m->hp().n_embd, D = 256;
    REQUIRE(V > D);
    auto r = runner(m, gpu0(), "auto");
    const int seq = r->new_sequence();
    std::vector<float> h(static_cast<size_t>(2 * E));
    for (size_t i = 0; i < h.size(); ++i) h[i] = std::cos(0.21f * static_cast<float>(i));
    const std::vector<int32_t> next = {17, 5};
    std::vector<float> full(static_cast<size_t>(V)), part(static_cast<size_t>(V));
    r->mtp(seq, h.data(), next.data(), 2, 0, full.data(), nullptr, 0);
    r->mtp(seq, h.data(), next.data(), 2, 0, part.data(), nullptr, D);  // the same positions again
    CHECK(std::equal(part.begin(), part.begin() + D, full.begin()));
    CHECK(std::all_of(part.begin() + D, part.end(), [](float x) { return std::isinf(x) && x < 0; }));
}

// STRATA_TEST_HANDOFF_DROP on the GPU: a window whose flag stays down fails with the clear
// HandoffError after STRATA_SPLIT_WAIT_MS, whichever side of the hand-off the card is on,
// and the next request runs whole. The request's time holds the windows before the drop,
// the dropped window's own work and the stage's restart besides the wait, so the bound
// here is the limit -10% / +10% plus three times the windows before it (the wait alone is
// held to +-10% by "a hand-off wait on the device times out after its limit").
TEST_CASE("gpu: a dropped hand-off fails the window after its limit and the runner recovers",
          "[gpu][model][handoff]") {
    if (!have_gpu()) return;
    std::shared_ptr<const Model> m = tiny(synth::Arch::Llama, GgmlType::Q8_0);
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = {5, 9, 2};  // one prompt window, then one per token
    const int64_t wait_ms = 1000, drop = 3;
    const std::string g = gpu0();
    const std::vector<std::string> placements = {"cpu:0," + g, g + ",cpu:0", g + "," + g};
    using clock = std::chrono::steady_clock;
    for (const std::string& devs : placements) {
        INFO(devs);
        auto clean = split_modes(m, devs, true, 0, wait_ms);
        const std::vector<int32_t> want = test::gen(*clean, tok, prompt, 0, 8, {}).out;
        auto t0 = clock::now();
        test::gen(*clean, tok, prompt, 0, drop - 1, {});  // the windows before the dropped one
        const double before_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

        auto r = split_modes(m, devs, true, 0, wait_ms, drop);
        REQUIRE(dynamic_cast<SplitRunner&>(*r).overlap());
        t0 = clock::now();
        CHECK_THROWS_AS(test::gen(*r, tok, prompt, 0, 8, {}), HandoffError);
        const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
        INFO("failed after " << ms << " ms; the windows before it took " << before_ms << " ms");
        CHECK(ms >= 0.9 * wait_ms);
        CHECK(ms <= 1.1 * wait_ms + 3 * before_ms);
        CHECK(r->runner_stats().handoff_timeouts >= 1);
        CHECK(test::gen(*r, tok, prompt, 0, 8, {}).out == want);  // the window ids moved past the drop
    }
}

// A token id outside the vocabulary is the clear error before anything runs on it, on the
// GPU as on the CPU (the host checks the ids that go in: a GPU's own check in get_rows
// reaches the host only at its next wait), and the next window is unaffected.
TEST_CASE("gpu: a token id outside the vocabulary is an error, and the next window runs whole", "[gpu][model]") {
    if (!have_gpu()) return;
    auto m = tiny(synth::Arch::Llama, GgmlType::Q8_0);
    const auto V = static_cast<size_t>(m->hp().n_vocab);
    for (const std::string& devs : {gpu0(), gpu0() + ",cpu:0"}) {
        auto r = runner(m, devs, devs == gpu0() ? "auto" : "0-0,1-1");
        INFO(r->describe());
        const auto eval = [&](Runner& on, int seq, std::vector<int32_t> toks) {
            std::vector<float> logits(V);
            const Runner::Item it{seq, toks, false};
            on.eval(std::span<const Runner::Item>(&it, 1), logits.data());
            return logits;
        };
        const int s = r->new_sequence();
        CHECK_THROWS_WITH(eval(*r, s, {5, static_cast<int32_t>(V) + 7, 2}),
                          Catch::Contains("token id " + std::to_string(V + 7) + " is out of range"));
        CHECK_THROWS_WITH(eval(*r, s, {-3}), Catch::Contains("token id -3 is out of range"));
        r->reset_sequence(s);
        auto fresh = runner(m, devs, devs == gpu0() ? "auto" : "0-0,1-1");
        CHECK(eval(*r, s, {5, 9, 2}) == eval(*fresh, fresh->new_sequence(), {5, 9, 2}));
    }
}

// CUDA graphs (kernels/cuda/graph.cu): a window's kernels are collected, captured the
// second time the very same launches come and replayed after. Decode steps must replay
// (their positions and window numbers are device memory, not launch arguments) and give
// the text of kernels launched one by one, in every mode; a CPU HIP runtime keeps the
// launches as its "graph", so the same decisions run here.
TEST_CASE("gpu: windows replayed as graphs give the text of kernels launched one by one",
          "[gpu][model][determinism][graphs]") {
    if (!have_gpu()) return;
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7,
                                                                                synth::GdnLayout::Split, /*mtp=*/true)));
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    const int64_t n = 24;
    const std::string g = gpu0();
    const auto make = [&](const std::string& devs, bool graphs) {
        const int64_t L = m->hp().n_layer;
        SplitConfig cfg;
        cfg.wait_ms = 60000;
        cfg.host_timeout_ms = 0;
        cfg.gpu_graphs = graphs;
        cfg.shared_device_overlap = true;
        return make_split_runner(m, plan_split(devs, "auto", L, layer_weight_bytes(m->file(), L), head_weight_bytes(m->file())),
                                 1, 160, GgmlType::F16, cfg);
    };
    for (const std::string& devs : {g, g + "," + g, "cpu:0," + g}) {
        INFO(devs);
        auto off = make(devs, false);
        const std::vector<int32_t> want = test::gen(*off, tok, prompt, 0, n, {}).out;
        REQUIRE(want.size() == static_cast<size_t>(n));
        const Runner::Stats so = off->runner_stats();
        CHECK(so.graph_replayed + so.graph_captured + so.graph_direct == 0);  // off: nothing collected

        auto on = make(devs, true);
        CHECK(test::gen(*on, tok, prompt, 0, n, {}).out == want);
        const Runner::Stats s = on->runner_stats();
        INFO("replayed " << s.graph_replayed << ", captured " << s.graph_captured << ", direct " << s.graph_direct);
        // Each GPU stage: two decode graphs (a window's inputs alternate between two
        // staging halves), captured the second time each comes, replayed after.
        const int64_t gpu_stages = devs == g ? 1 : (devs == g + "," + g ? 2 : 1);
        CHECK(s.graph_captured <= 3 * gpu_stages);
        CHECK(s.graph_replayed >= (n - 6) * gpu_stages);
        for (int k : {1, 3}) {
            INFO("speculation, K=" << k);
            CHECK(test::gen(*on, tok, prompt, k, n, want).out == want);
        }
        CHECK(on->runner_stats().graph_replayed > s.graph_replayed);
    }
}

// STRATA_GPU_PROFILE (kernels/cuda/profiler.h): the host's time always, each kernel timed
// when kernels go one by one (graphs off), and the text unchanged either way.
TEST_CASE("gpu: a profiled GPU stage times its kernels and gives the same text", "[gpu][model][profile]") {
    if (!have_gpu()) return;
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7)));
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox", false);
    const auto make = [&](bool profile, bool graphs) {
        const int64_t L = m->hp().n_layer;
        SplitConfig cfg;
        cfg.gpu_profile = profile;
        cfg.gpu_graphs = graphs;
        return make_split_runner(m, plan_split("cpu:0," + gpu0(), "auto", L, layer_weight_bytes(m->file(), L),
                                               head_weight_bytes(m->file())),
                                 1, 64, GgmlType::F16, cfg);
    };
    auto plain = make(false, true);
    const std::vector<int32_t> want = test::gen(*plain, tok, prompt, 0, 12, {}).out;
    CHECK(plain->device_profile().empty());
    for (bool graphs : {false, true}) {
        INFO("graphs " << graphs);
        auto timed = make(true, graphs);
        CHECK(test::gen(*timed, tok, prompt, 0, 12, {}).out == want);
        const std::string p = timed->device_profile();
        INFO(p);
        CHECK(p.find(gpu0() + " (layers") != std::string::npos);
        CHECK(p.find("queue items") != std::string::npos);
        CHECK(p.find(" 0 queue items") == std::string::npos);
        CHECK((p.find("us/call") != std::string::npos) == !graphs);
        CHECK(p.find(" 0 kernels") == std::string::npos);
        const Runner::Stats s = timed->runner_stats();
        CHECK((s.graph_replayed > 0) == graphs);
    }
}
