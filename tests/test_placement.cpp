// Device budgets, layer streaming and experts in host memory (--max-vram, --stream-layers,
// --layer-prefetch-depth, --cpu-moe, --moe-cache-mib; docs/streaming.md): the planner's
// policy on synthetic sizes, and on real (tiny) models logits bit-identical to a run
// without them whatever the plan (every layer resident, one, two or all streamed,
// prefetch depth 0 and 1, experts on the host with and without the device's cache, one
// stage or two, with speculation and pipelined windows), the device's peak memory within
// its budget.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/generate.h"
#include "engine/model/placement.h"
#include "engine/model/streaming.h"
#include "engine/options.h"
#include "engine/split/split_runner.h"
#include "engine/split/stage_placement.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

constexpr int64_t kMiB = 1 << 20;

PlacementRequest req(std::vector<int64_t> layers, int64_t fixed, bool stream = true, int depth = 1) {
    PlacementRequest r;
    r.device = "cuda:0";
    r.fixed = fixed;
    r.layer_bytes = std::move(layers);
    r.stream = stream;
    r.depth = depth;
    return r;
}

PlacementPlan plan(PlacementRequest r, int64_t budget) {
    r.budget = budget;
    return plan_placement(r);
}

std::shared_ptr<const Model> model(synth::Arch arch, int64_t n_layer = 4) {
    synth::ModelConfig c = synth::make_config(arch, synth::Preset::Tiny);
    c.n_layer = n_layer;
    c.mtp = c.hybrid();
    return Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 11)));
}

SplitPlan split_plan(const Model& m, const std::string& devices) {
    const int64_t n = m.hp().n_layer;
    return plan_split(devices, "auto", n, layer_weight_bytes(m.file(), n), head_weight_bytes(m.file()));
}

// Every stage's request under cfg, as the runner will measure it (a fresh device each).
std::vector<PlacementRequest> requests(const Model& m, const SplitPlan& p, const SplitConfig& cfg, int64_t n_ctx) {
    std::vector<PlacementRequest> out;
    for (size_t s = 0; s < p.stages.size(); ++s) {
        auto dev = open_device(p.stages[s].device, 1, -1, cfg.staged_copies);
        out.push_back(stage_request(m, dev->ops(), p.stages[s], s == 0, s + 1 == p.stages.size(), cfg, n_ctx,
                                    GgmlType::F16));
    }
    return out;
}

}  // namespace

TEST_CASE("placement: the planner keeps what fits and streams the rest", "[placement]") {
    const std::vector<int64_t> L{10 * kMiB, 10 * kMiB, 10 * kMiB, 10 * kMiB};
    SECTION("everything fits: all resident, no slot") {
        const PlacementPlan p = plan(req(L, 20 * kMiB), 60 * kMiB);
        CHECK(p.placement.n_resident == 4);
        CHECK(p.placement.n_slots == 0);
        CHECK(p.peak == 60 * kMiB);
        CHECK(plan(req(L, 20 * kMiB, /*stream=*/false), 60 * kMiB).placement.n_resident == 4);
    }
    SECTION("one byte short: the last layer streams, the prefetch slot taken from the residents") {
        const PlacementPlan p = plan(req(L, 20 * kMiB), 60 * kMiB - 1);
        // depth 1 needs two slots: 20 + 10 r + 20 <= 60 - 1 -> r = 1.
        CHECK(p.placement.n_resident == 1);
        CHECK(p.placement.n_slots == 2);
        CHECK(p.placement.slot_bytes == static_cast<size_t>(10 * kMiB));
        CHECK(p.depth == 1);
        CHECK(p.peak == 50 * kMiB);
        CHECK(p.peak <= 60 * kMiB - 1);
        // Depth 0: one slot, so two layers stay.
        const PlacementPlan q = plan(req(L, 20 * kMiB, true, 0), 60 * kMiB - 1);
        CHECK(q.placement.n_resident == 2);
        CHECK(q.placement.n_slots == 1);
    }
    SECTION("the prefetch goes to depth 0 only when two slots do not fit") {
        const PlacementPlan p = plan(req(L, 20 * kMiB), 40 * kMiB);  // 20 + 2 x 10 fits exactly
        CHECK(p.placement.n_resident == 0);
        CHECK(p.depth == 1);
        CHECK_FALSE(p.depth_reduced);
        const PlacementPlan q = plan(req(L, 20 * kMiB), 40 * kMiB - 1);
        CHECK(q.placement.n_resident == 0);  // one resident and one slot would be 40 as well
        CHECK(q.placement.n_slots == 1);
        CHECK(q.depth == 0);
        CHECK(q.depth_reduced);
        CHECK(q.peak <= 40 * kMiB - 1);
        CHECK_THAT(q.describe(req(L, 20 * kMiB)), Catch::Contains("reduced to fit"));
    }
    SECTION("slots are as large as the largest streamed layer; residency is a leading prefix") {
        const std::vector<int64_t> M{4 * kMiB, 30 * kMiB, 4 * kMiB, 4 * kMiB, 4 * kMiB};
        // Keeping layer 1 (30) would leave no room: the slots are sized by what streams.
        const PlacementPlan p = plan(req(M, 0), 30 * kMiB);
        CHECK(p.placement.n_resident == 0);
        CHECK(p.depth == 0);  // two slots of 30 do not fit
        CHECK(p.placement.slot_bytes == static_cast<size_t>(30 * kMiB));
        const PlacementPlan q = plan(req(M, 0), 42 * kMiB);
        CHECK(q.placement.n_resident == 2);  // 4 + 30 resident, slots of 4 for the rest
        CHECK(q.placement.slot_bytes == static_cast<size_t>(4 * kMiB));
        CHECK(q.depth == 1);
        CHECK(q.peak == 42 * kMiB);
    }
    SECTION("budget_for is the boundary the planner uses") {
        const PlacementRequest r = req({3 * kMiB, 5 * kMiB, 7 * kMiB, 2 * kMiB}, 9 * kMiB);
        for (int d : {0, 1})
            for (int64_t res = 0; res <= 4; ++res) {
                PlacementRequest rd = r;
                rd.depth = d;
                const int64_t b = budget_for(rd, res, d);
                const PlacementPlan p = plan(rd, b);
                INFO("depth " << d << " resident " << res << " budget " << b);
                CHECK(p.peak <= b);
                CHECK(p.placement.n_resident >= res);
            }
    }
    SECTION("too small, or no streaming: a clear error naming what is needed") {
        CHECK_THROWS_WITH(plan(req(L, 20 * kMiB), 30 * kMiB - 1),
                          Catch::Contains("too small") && Catch::Contains("at least 30.0 MiB"));
        CHECK_THROWS_WITH(plan(req(L, 20 * kMiB, /*stream=*/false), 50 * kMiB),
                          Catch::Contains("--stream-layers") && Catch::Contains("60.0 MiB"));
    }
}

TEST_CASE("placement: a device's meter refuses what passes its budget", "[placement]") {
    MemoryMeter m;
    m.set_limit(1000);
    Buffer a = m.metered(600, "a", [] { return host_buffer(600); });
    CHECK(m.used() == 600);
    CHECK_THROWS_WITH(m.metered(500, "b", [] { return host_buffer(500); }),
                      Catch::Contains("budget") && Catch::Contains("(b)"));
    CHECK(m.used() == 600);
    a = Buffer();
    CHECK(m.used() == 0);
    Buffer b = m.metered(1000, "c", [] { return host_buffer(1000); });
    CHECK(m.peak() == 1000);
}

TEST_CASE("placement: --max-vram lists", "[placement][flags]") {
    const auto b = parse_budgets("cuda:0=10,cuda:1=1.5GiB,cpu:0=512MiB,cuda:2=auto");
    CHECK(b.at("cuda:0") == int64_t{10} << 30);
    CHECK(b.at("cuda:1") == int64_t{3} << 29);
    CHECK(b.at("cpu:0") == int64_t{512} << 20);
    CHECK(b.at("cuda:2") == -1);
    CHECK(parse_budgets("").empty());
    for (const char* bad : {"cuda:0", "cuda:0=", "=5", "cuda:0=ten", "cuda:0=5TB", "cuda:0=0", "cuda:0=1,cuda:0=2",
                            "cuda:0=-3"})
        CHECK_THROWS_AS(parse_budgets(bad), UsageError);
}

TEST_CASE("streaming: logits are bit-identical whatever the placement, within the budget", "[placement][determinism]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35}) {
        const auto m = model(arch, 5);
        const int64_t L = m->hp().n_layer;
        auto plain = make_local_runner(m, 1, 32, GgmlType::F16);
        const auto want = test::run_windows(*plain, {5, 9, 2, 77, 31, 8}, 6);
        for (bool staged : {false, true}) {
            SplitConfig cfg;
            cfg.staged_copies = staged;  // the path a GPU takes: blocks written to staging, then copied in
            cfg.stream_layers = true;
            SplitPlan one;
            one.stages.push_back({"cpu:0", 0, L});
            const PlacementRequest r = requests(*m, one, cfg, 32).front();
            for (int depth : {0, 1})
                for (int64_t res : {L, L - 2, L - 3, int64_t{0}}) {
                    cfg.prefetch_depth = depth;
                    PlacementRequest rd = r;
                    rd.depth = depth;
                    rd.budget = budget_for(rd, res, depth);
                    const int64_t budget = rd.budget;
                    const PlacementPlan pp = plan_placement(rd);
                    CHECK(pp.placement.n_resident >= res);
                    if (depth == 0) CHECK(pp.placement.n_resident == res);  // two or more stream: one slot pays
                    cfg.budgets = {{"cpu:0", budget}};
                    auto run = make_local_runner(m, 1, 32, GgmlType::F16, cfg);
                    INFO(synth::arch_name(arch) << " staged " << staged << " depth " << depth << " -> " << run->describe());
                    CHECK_THAT(run->describe(), Catch::Contains(pp.describe(rd)));  // the runner measured the same
                    CHECK(test::run_windows(*run, {5, 9, 2, 77, 31, 8}, 6) == want);
                    res = pp.placement.n_resident;
                    const Runner::Stats st = run->runner_stats();
                    CHECK(st.device_peak_bytes <= budget);
                    CHECK(st.device_peak_bytes > 0);
                    if (L - res >= 3) {
                        CHECK(st.stream_copies > 0);
                        if (depth == 1) {
                            CHECK(st.prefetch_hits > 0);
                            CHECK(st.sync_loads <= 1);  // only the very first layer waits for its copy
                        } else {
                            CHECK(st.prefetch_hits == 0);
                            CHECK(st.sync_loads == st.stream_copies);
                        }
                    }
                }
        }
    }
}

TEST_CASE("streaming: a verify window over streamed recurrent layers rolls back by restore and replay",
          "[placement][rollback]") {
    // Runner::rollback would run a streamed GDN layer's conv without its weights copied in:
    // it refuses, changing nothing, and the Verifier restores and replays instead.
    const auto m = model(synth::Arch::Qwen3Next, 4);
    const int64_t L = m->hp().n_layer;
    SplitConfig cfg;
    cfg.stream_layers = true;
    SplitPlan one;
    one.stages.push_back({"cpu:0", 0, L});
    PlacementRequest r = requests(*m, one, cfg, 32).front();
    r.budget = budget_for(r, 0, 0);
    REQUIRE(plan_placement(r).placement.n_resident == 0);
    cfg.budgets = {{"cpu:0", r.budget}};
    auto run = make_local_runner(m, 1, 32, GgmlType::F16, cfg);
    const std::vector<int32_t> prompt = {5, 9, 2, 77}, window = {40, 41, 42};
    const int s = run->new_sequence();
    const Runner::Item p{s, prompt, false};
    run->eval(std::span<const Runner::Item>(&p, 1), nullptr);
    run->snapshot(s, 3);
    const Runner::Item w{s, window, false};
    run->eval(std::span<const Runner::Item>(&w, 1), nullptr);
    CHECK_FALSE(run->rollback(s, 2));
    CHECK(run->n_past(s) == 7);
}

TEST_CASE("streaming: any placement of a stage computes the same bits", "[placement][determinism]") {
    // The planner never streams one layer alone (a slot costs what the layer does), so
    // the mechanism is checked here with placements given directly: 1, 2 and all layers
    // streamed through one slot or two.
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next, synth::Arch::Qwen35Moe}) {
        const auto m = model(arch, 4);
        const int64_t L = m->hp().n_layer;
        const std::vector<int32_t> toks{3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
        const auto want = test::eval_all(*m, 1, toks, 3);
        ThreadPool pool(1);
        CpuOps ops(pool);
        size_t largest = 0;
        for (int64_t il = 0; il < L; ++il) largest = std::max(largest, m->layer_bytes(ops, il));
        for (int64_t res : {L - 1, L - 2, int64_t{0}})
            for (int slots : {1, 2}) {
                INFO(synth::arch_name(arch) << ": " << res << " resident, " << slots << " slot(s)");
                StagePlacement pl;
                pl.n_resident = res;
                pl.n_slots = slots;
                pl.slot_bytes = largest;
                const int64_t before = ops.meter().used();
                {
                    const auto w = m->bind(ops, 0, L, true, true, &pl);
                    ForwardCtx ctx(ops, w.get());
                    SeqState s = m->new_state(ops, 64, GgmlType::F16);
                    std::vector<float> got(want.size());
                    const int64_t V = m->hp().n_vocab;
                    for (size_t i = 0; i < toks.size(); i += 3) {
                        const size_t n = std::min<size_t>(3, toks.size() - i);
                        m->eval(ctx, s, std::span<const int32_t>(toks.data() + i, n), got.data() + i * static_cast<size_t>(V), true);
                    }
                    CHECK(got == want);
                }
                CHECK(ops.meter().used() == before);  // every block and slot went back
            }
    }
}

TEST_CASE("streaming: a two-stage split under budgets on both devices", "[placement][split][determinism]") {
    const auto m = model(synth::Arch::Qwen3Next, 6);
    auto plain = make_local_runner(m, 1, 32, GgmlType::F16);
    const auto want = test::run_windows(*plain);
    const SplitPlan p = split_plan(*m, "cpu:0,cpu:1");
    for (bool overlap : {false, true}) {
        SplitConfig cfg;
        cfg.overlap = overlap;
        cfg.wait_ms = 10000;
        cfg.stream_layers = true;
        const auto rs = requests(*m, p, cfg, 32);
        for (int64_t res : {int64_t{0}, int64_t{1}}) {
            cfg.budgets.clear();
            for (size_t s = 0; s < rs.size(); ++s) cfg.budgets[p.stages[s].device] = budget_for(rs[s], res, 1);
            auto r = make_split_runner(m, p, 1, 32, GgmlType::F16, cfg);
            INFO(r->describe());
            CHECK(test::run_windows(*r) == want);
            CHECK(r->runner_stats().device_peak_bytes <= std::max(cfg.budgets["cpu:0"], cfg.budgets["cpu:1"]));
        }
    }
}

TEST_CASE("streaming: speculation and pipelined windows keep greedy output", "[placement][spec][pipeline]") {
    const std::shared_ptr<const Model> m = Model::load(test::to_file(
        test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 7, synth::GdnLayout::Split, /*mtp=*/true)));
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps over the lazy dog", false);
    auto gen = [&](Runner& r, int spec, std::optional<PipelineOptions> popt = std::nullopt) {
        GenerateOptions opt;
        opt.n_predict = 32;
        opt.n_batch = 5;
        opt.spec_draft = spec;
        opt.pipeline = popt;
        std::vector<int32_t> out;
        generate(r, tok, prompt, opt, [](std::string_view) { return true; }, &out);
        return out;
    };
    auto plain = make_local_runner(m, 2, 160, GgmlType::F16);
    const std::vector<int32_t> want = gen(*plain, 0);
    REQUIRE(want.size() == 32);

    SplitConfig cfg;
    cfg.stream_layers = true;
    cfg.max_rows = 8;
    SplitPlan one;
    one.stages.push_back({"cpu:0", 0, m->hp().n_layer});
    cfg.budgets = {{"cpu:0", budget_for(requests(*m, one, cfg, 160).front(), 0, 1)}};
    auto local = make_local_runner(m, 1, 160, GgmlType::F16, cfg);
    CHECK_THAT(local->describe(), Catch::Contains("0 layers resident"));
    for (int k : {0, 1, 3}) CHECK(gen(*local, k) == want);

    const SplitPlan p = split_plan(*m, "cpu:0,cpu:1");
    cfg.pipeline_windows = 2;
    cfg.wait_ms = 10000;
    const auto rs = requests(*m, p, cfg, 160);
    cfg.budgets.clear();
    for (size_t s = 0; s < rs.size(); ++s) cfg.budgets[p.stages[s].device] = budget_for(rs[s], 0, 1);
    auto pipe = make_split_runner(m, p, 1, 160, GgmlType::F16, cfg);
    REQUIRE(pipe->stage_pipe() != nullptr);
    PipelineOptions always;
    always.theta = 0;
    CHECK(gen(*pipe, 3, always) == want);
    CHECK(gen(*pipe, 0) == want);

    // The same with the experts in host memory and the device's cache re-ranked every window.
    cfg.n_cpu_moe = -1;
    cfg.moe_cache_bytes = size_t{1} << 20;
    cfg.adapt_every = 1;
    const auto rh = requests(*m, p, cfg, 160);
    cfg.budgets.clear();
    for (size_t s = 0; s < rh.size(); ++s) cfg.budgets[p.stages[s].device] = budget_for(rh[s], 0, 1);
    auto pipe_host = make_split_runner(m, p, 1, 160, GgmlType::F16, cfg);
    CHECK(gen(*pipe_host, 3, always) == want);
    CHECK(pipe_host->runner_stats().expert_rows_device > 0);
}

TEST_CASE("streaming: bad budgets are refused with what they lack", "[placement][errors]") {
    const auto m = model(synth::Arch::Llama, 4);
    SplitConfig cfg;
    SplitPlan one;
    one.stages.push_back({"cpu:0", 0, m->hp().n_layer});
    const PlacementRequest r = requests(*m, one, cfg, 32).front();
    cfg.budgets = {{"cpu:0", budget_for(r, 4, 0) - 1}};
    CHECK_THROWS_WITH(make_local_runner(m, 1, 32, GgmlType::F16, cfg), Catch::Contains("--stream-layers"));
    cfg.stream_layers = true;
    cfg.budgets = {{"cpu:0", budget_for(r, 0, 0) - 1}};
    CHECK_THROWS_WITH(make_local_runner(m, 1, 32, GgmlType::F16, cfg), Catch::Contains("too small"));
    cfg.budgets = {{"cpu:7", int64_t{1} << 30}};
    CHECK_THROWS_WITH(make_local_runner(m, 1, 32, GgmlType::F16, cfg), Catch::Contains("runs no stage"));
    cfg.budgets = {{"cpu:0", -1}};
    CHECK_THROWS_WITH(make_local_runner(m, 1, 32, GgmlType::F16, cfg), Catch::Contains("does not report its memory"));
}

TEST_CASE("host experts: the same logits with the experts on the host, in part or all, with the device cache",
          "[placement][moe][determinism]") {
    for (auto arch : {synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35Moe}) {
        const auto m = model(arch, 4);
        auto plain = make_local_runner(m, 1, 32, GgmlType::F16);
        const auto want = test::run_windows(*plain, {5, 9, 2, 77, 31, 8}, 6);
        struct Case {
            int64_t n_cpu_moe;
            size_t cache;
            int adapt;
            bool staged;
        };
        for (const Case c : {Case{-1, 0, 0, false}, Case{2, 0, 0, false}, Case{-1, 0, 0, true},
                             Case{-1, size_t{1} << 20, 1, false}, Case{-1, size_t{64} << 20, 1, false},
                             Case{-1, size_t{64} << 20, 0, true}, Case{3, size_t{64} << 20, 2, true}}) {
            SplitConfig cfg;
            cfg.n_cpu_moe = c.n_cpu_moe;
            cfg.moe_cache_bytes = c.cache;
            cfg.adapt_every = c.adapt;
            cfg.staged_copies = c.staged;
            auto run = make_local_runner(m, 1, 32, GgmlType::F16, cfg);
            INFO(synth::arch_name(arch) << " n_cpu_moe " << c.n_cpu_moe << " cache " << c.cache << " adapt " << c.adapt
                                        << " staged " << c.staged);
            CHECK(test::run_windows(*run, {5, 9, 2, 77, 31, 8}, 6) == want);
            const Runner::Stats st = run->runner_stats();
            CHECK(st.expert_rows_host > 0);
            if (c.cache > size_t{1} << 20) {
                CHECK(st.expert_reranks > 0);
                CHECK(st.expert_rows_device > 0);  // the hot experts ran on the device's side
            }
            if (c.cache == 0) CHECK(st.expert_rows_device == 0);
        }
    }
}

TEST_CASE("host experts: under a budget with every layer streamed, and on a two-stage split",
          "[placement][moe][split][determinism]") {
    const auto m = model(synth::Arch::Qwen3Next, 6);
    auto plain = make_local_runner(m, 1, 32, GgmlType::F16);
    const auto want = test::run_windows(*plain);
    SplitConfig cfg;
    cfg.n_cpu_moe = -1;
    cfg.moe_cache_bytes = size_t{1} << 20;
    cfg.adapt_every = 1;
    cfg.stream_layers = true;
    SplitPlan one;
    one.stages.push_back({"cpu:0", 0, m->hp().n_layer});
    const PlacementRequest with_host = requests(*m, one, cfg, 32).front();
    SplitConfig no_host = cfg;
    no_host.n_cpu_moe = 0;
    no_host.moe_cache_bytes = 0;
    const PlacementRequest without = requests(*m, one, no_host, 32).front();
    CHECK(with_host.layer_bytes[0] < without.layer_bytes[0] / 2);  // the experts are most of a layer's bytes
    cfg.budgets = {{"cpu:0", budget_for(with_host, 0, 1)}};
    {
        auto run = make_local_runner(m, 1, 32, GgmlType::F16, cfg);
        INFO(run->describe());
        CHECK_THAT(run->describe(), Catch::Contains("0 layers resident"));
        CHECK(test::run_windows(*run) == want);
        CHECK(run->runner_stats().device_peak_bytes <= cfg.budgets["cpu:0"]);
    }
    const SplitPlan p = split_plan(*m, "cpu:0,cpu:1");
    for (bool overlap : {false, true}) {
        SplitConfig c2 = cfg;
        c2.overlap = overlap;
        c2.wait_ms = 10000;
        const auto rs = requests(*m, p, c2, 32);
        c2.budgets.clear();
        for (size_t s = 0; s < rs.size(); ++s) c2.budgets[p.stages[s].device] = budget_for(rs[s], 0, 1);
        auto r = make_split_runner(m, p, 1, 32, GgmlType::F16, c2);
        INFO(r->describe());
        CHECK(test::run_windows(*r) == want);
        const Runner::Stats st = r->runner_stats();
        CHECK(st.expert_rows_host > 0);
        CHECK(st.stream_copies > 0);
    }
}

namespace {

struct SlotView final : LayerWeights {
    const std::byte* at = nullptr;
};

// A stream of n layers of `bytes` each, layer j's block filled with the byte j + 1.
std::unique_ptr<LayerStream> byte_stream(Ops& ops, int n, int slots, size_t bytes) {
    std::vector<Buffer> mem;
    for (int s = 0; s < slots; ++s) mem.push_back(ops.alloc(bytes));
    std::vector<LayerStream::Layer> layers;
    for (int j = 0; j < n; ++j) {
        LayerStream::Layer l;
        l.il = 10 + j;  // the stage's layers need not start at 0
        l.bytes = bytes;
        l.host = ops.alloc_staging(bytes);
        std::memset(l.host.data(), j + 1, bytes);
        for (const Buffer& b : mem) {
            auto v = std::make_unique<SlotView>();
            v->at = static_cast<const std::byte*>(b.data());
            l.at_slot.push_back(std::move(v));
        }
        layers.push_back(std::move(l));
    }
    return std::make_unique<LayerStream>(ops, std::move(mem), std::move(layers));
}

// Enters layer il and checks that the view it hands out holds that layer's bytes.
bool holds(LayerStream& st, Ops& ops, int64_t il, size_t bytes) {
    st.enter(ops, il);
    const auto* v = static_cast<const SlotView*>(&st.layer(il));
    for (size_t i = 0; i < bytes; ++i)
        if (v->at[i] != static_cast<std::byte>(il - 10 + 1)) return false;
    return true;
}

}  // namespace

TEST_CASE("streaming: the slots always hold the layer that runs, whatever order layers come in", "[placement]") {
    ThreadPool pool(1);
    CpuOps ops(pool);
    const size_t bytes = size_t{3} << 20;  // long enough that a prefetch is still in flight
    SECTION("in order with two slots: every layer but the first prefetched") {
        auto st = byte_stream(ops, 4, 2, bytes);
        for (int w = 0; w < 3; ++w)
            for (int64_t il = 10; il < 14; ++il) CHECK(holds(*st, ops, il, bytes));
        const LayerStream::Stats s = st->stats();
        CHECK(s.sync_loads == 1);
        CHECK(s.prefetch_hits == 11);
        CHECK(s.copies == 13);  // one per entry, and the first layer's own
        CHECK(s.bytes == static_cast<int64_t>(13 * bytes));
    }
    SECTION("out of order: a stale prefetch is waited for, then the slot takes the layer asked for") {
        auto st = byte_stream(ops, 5, 2, bytes);
        CHECK(holds(*st, ops, 10, bytes));  // prefetches 11
        CHECK(holds(*st, ops, 13, bytes));  // 11 is not wanted: its copy lands, then 13's replaces it
        CHECK(holds(*st, ops, 11, bytes));
        CHECK(holds(*st, ops, 14, bytes));
        CHECK(holds(*st, ops, 10, bytes));  // prefetched after 14 (the next window's first)
        CHECK(st->stats().prefetch_hits >= 1);
        st->release(ops);  // a restart: nothing in flight, nothing known
        CHECK(holds(*st, ops, 12, bytes));
        CHECK(holds(*st, ops, 13, bytes));
    }
    SECTION("one slot: every layer copied at its turn") {
        auto st = byte_stream(ops, 3, 1, bytes);
        for (int w = 0; w < 2; ++w)
            for (int64_t il : {10, 11, 12}) CHECK(holds(*st, ops, il, bytes));
        CHECK(st->stats().sync_loads == 6);
        CHECK(st->stats().prefetch_hits == 0);
    }
    SECTION("as many slots as layers: after the first window nothing is copied again") {
        auto st = byte_stream(ops, 2, 2, bytes);
        for (int w = 0; w < 4; ++w)
            for (int64_t il : {10, 11}) CHECK(holds(*st, ops, il, bytes));
        CHECK(st->stats().copies == 2);
        CHECK(st->stats().reused == 6);
    }
    SECTION("a prefetch that cannot start: prefetch goes off, every layer is copied at its turn, nothing else changes") {
        auto st = byte_stream(ops, 4, 2, bytes);
        st->fail_prefetch(3);  // the third prefetch (layer 13's, in the first window) fails to start
        for (int w = 0; w < 3; ++w)
            for (int64_t il = 10; il < 14; ++il) CHECK(holds(*st, ops, il, bytes));
        CHECK_FALSE(st->prefetching());
        const LayerStream::Stats s = st->stats();
        CHECK(s.prefetch_hits == 2);        // 11 and 12, before the failure
        CHECK(s.sync_loads == 1 + 1 + 8);   // the first layer, 13 (its prefetch failed), then every layer
        CHECK(s.copies == s.prefetch_hits + s.sync_loads);
    }
    SECTION("destroyed with a prefetch in flight: it is awaited first") {
        auto st = byte_stream(ops, 3, 2, size_t{64} << 20);
        st->enter(ops, 10);  // starts 11's copy of 64 MiB
        st.reset();          // must not free the slot under the copy (ASan/TSan would see it; here: no crash)
        CHECK(ops.meter().used() == 0);
    }
}
