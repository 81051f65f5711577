// The layer split: plan parsing, bit-identical results across placements and modes,
// and the fault paths (a dropped hand-off, the host watchdog).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/backend/device.h"
#include "engine/backend/handoff.h"
#include "engine/core/alarm.h"
#include "engine/split/plan.h"
#include "engine/split/split_runner.h"
#include "tests/model_helpers.h"

using namespace strata;

TEST_CASE("split plan: explicit ranges and auto balance", "[split]") {
    const std::vector<uint64_t> bytes(8, 100);
    SplitPlan p = plan_split("cpu:0,cpu:1", "0-3,4-7", 8, bytes, 0);
    REQUIRE(p.stages.size() == 2);
    CHECK(p.stages[0].l0 == 0);
    CHECK(p.stages[0].l1 == 4);
    CHECK(p.stages[1].device == "cpu:1");
    CHECK(p.stages[1].l1 == 8);
    CHECK(p.describe() == "cpu:0 layers 0-3 | cpu:1 layers 4-7");
    p = plan_split("cpu:0,cpu:1", "auto", 8, bytes, 0);
    CHECK(p.stages[0].l1 == 4);
    // The head weighs on the last stage: it gets fewer layers.
    p = plan_split("cpu:0,cpu:1", "auto", 8, bytes, 400);
    CHECK(p.stages[0].l1 == 6);
    p = plan_split("cpu:0,cpu:1,cpu:2", "", 9, std::vector<uint64_t>(9, 1), 0);
    CHECK(p.stages[1].l0 == 3);
    CHECK(p.stages[2].l0 == 6);
}

TEST_CASE("split plan: bad splits are refused clearly", "[split]") {
    const std::vector<uint64_t> bytes(8, 1);
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-2,4-7", 8, bytes, 0), Catch::Contains("layers 3-3 are in no range"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-4,4-7", 8, bytes, 0), Catch::Contains("overlaps"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-3,4-8", 8, bytes, 0), Catch::Contains("past the model"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-3,4-6", 8, bytes, 0), Catch::Contains("layers 7-7 are in no range"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1,cpu:2", "auto", 2, std::vector<uint64_t>(2, 1), 0),
                      Catch::Contains("3 stages for a model with only 2 layers"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-3", 8, bytes, 0), Catch::Contains("1 ranges but --devices names 2"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "0-3,x-7", 8, bytes, 0), Catch::Contains("not a layer range"));
    CHECK_THROWS_WITH(plan_split("cpu:0,cpu:1", "3-0,4-7", 8, bytes, 0), Catch::Contains("backwards"));
    CHECK_THROWS_WITH(plan_split("cpu:0,", "auto", 8, bytes, 0), Catch::Contains("empty device name"));
    CHECK_THROWS_WITH(open_device("gpu:0", 1, 0), Catch::Contains("unknown device 'gpu:0'"));
    CHECK_THROWS_WITH(open_device("cpu:x", 1, 0), Catch::Contains("unknown device"));
}

namespace {

SplitPlan plan(const Model& m, const std::string& devs, const std::string& split) {
    const int64_t n = m.hp().n_layer;
    return plan_split(devs, split, n, layer_weight_bytes(m.file(), n), head_weight_bytes(m.file()));
}

}  // namespace

// What strata run reports as the weights a decode token reads (the figure gpu-check
// divides by the card's bandwidth): every layer, one token's share of the experts, the
// head; not the embedding table nor the MTP block.
TEST_CASE("split plan: the weight bytes one decode token reads", "[split]") {
    synth::ModelConfig c = synth::make_config(synth::Arch::Qwen3Next, synth::Preset::Tiny);
    c.mtp = true;
    const GgufFile f = test::to_file(synth::build_model(c, GgmlType::Q8_0, 3));
    uint64_t dense = 0, experts = 0, embd = 0, mtp = 0;
    for (const auto& t : f.tensors()) {
        if (t.name == "token_embd.weight") embd += t.nbytes;
        else if (t.name.rfind("blk." + std::to_string(c.n_layer) + ".", 0) == 0) mtp += t.nbytes;
        else if (t.name.find("_exps.") != std::string::npos) experts += t.nbytes;
        else if (t.name.rfind("blk.", 0) == 0) dense += t.nbytes;
    }
    REQUIRE(experts > 0);
    REQUIRE(mtp > 0);
    REQUIRE(embd > 0);
    const uint64_t head = head_weight_bytes(f);
    CHECK(head == f.find_tensor("output.weight")->nbytes);
    const uint64_t got = decode_weight_bytes(f, c.n_layer, c.n_expert, c.n_expert_used);
    const double want = static_cast<double>(dense + head) +
                        static_cast<double>(experts) * static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
    CHECK(std::abs(static_cast<double>(got) - want) <= 1.0);
    // A dense model: the whole file but its embedding table (and the output norm's few bytes).
    const GgufFile d = test::to_file(synth::build_model(synth::make_config(synth::Arch::Llama, synth::Preset::Tiny), GgmlType::Q8_0, 3));
    uint64_t all = 0;
    for (const auto& t : d.tensors())
        if (t.name != "token_embd.weight" && t.name != "output_norm.weight") all += t.nbytes;
    CHECK(decode_weight_bytes(d, 2, 0, 0) == all);
}

TEST_CASE("split: logits are bit-identical for every placement and mode", "[split][determinism]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35,
                      synth::Arch::Qwen35Moe}) {
        // Four layers, so that three stages fit (the dense tiny presets have two).
        synth::ModelConfig c = synth::make_config(arch, synth::Preset::Tiny);
        c.n_layer = 4;
        c.mtp = c.hybrid();
        std::shared_ptr<const Model> m = Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 4)));
        auto local = make_local_runner(m, 2, 32, GgmlType::F16);
        const auto want = test::run_windows(*local);
        const int64_t last = m->hp().n_layer - 1;
        for (int mode = 0; mode < 3; ++mode) {
            const bool overlap = mode == 1;
            SplitConfig cfg;
            cfg.overlap = overlap;
            cfg.wait_ms = 10000;
            cfg.staged_copies = mode == 2;  // the copies a GPU makes at a window's edges, on the CPU
            for (const auto& [devs, split] : std::vector<std::pair<std::string, std::string>>{
                     {"cpu:0,cpu:1", "auto"},
                     {"cpu:0,cpu:1", fmt::format("0-0,1-{}", last)},
                     {"cpu:0,cpu:1,cpu:2", "auto"},
                     {"cpu:0,cpu:1,cpu:0", "auto"}}) {
                auto r = make_split_runner(m, plan(*m, devs, split), 1, 32, GgmlType::F16, cfg);
                INFO(synth::arch_name(arch) << " " << devs << " " << split << " mode=" << mode << " -> "
                                            << r->describe());
                CHECK(r->overlap() == (overlap && devs != "cpu:0,cpu:1,cpu:0"));
                CHECK(test::run_windows(*r) == want);
            }
        }
    }
}

TEST_CASE("split: a dropped hand-off fails the window in bounded time, then serving goes on", "[split][fault]") {
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Qwen3Next, GgmlType::Q8_0, 4)));
    SplitConfig cfg;
    cfg.overlap = true;
    cfg.wait_ms = 300;
    cfg.drop_window = 2;
    auto r = make_split_runner(m, plan(*m, "cpu:0,cpu:1", "auto"), 1, 32, GgmlType::F16, cfg);
    std::vector<float> logits(static_cast<size_t>(m->hp().n_vocab));
    const std::vector<int32_t> toks = {1, 2, 3};
    const int seq = r->new_sequence();
    const Runner::Item it{seq, toks, false};
    r->eval(std::span<const Runner::Item>(&it, 1), logits.data());  // window 1: fine
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(r->eval(std::span<const Runner::Item>(&it, 1), logits.data()), HandoffError);  // window 2
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(secs >= 0.25);
    CHECK(secs < 3.0);
    CHECK(r->stats().handoff_timeouts == 1);
    try {
        r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
    } catch (const HandoffError&) {
        FAIL("window 3 must succeed");
    }
    // Serial mode, where each stage runs on the caller's thread: the same.
    cfg.overlap = false;
    auto serial = make_split_runner(m, plan(*m, "cpu:0,cpu:1", "auto"), 1, 32, GgmlType::F16, cfg);
    const int s2 = serial->new_sequence();
    const Runner::Item it2{s2, toks, false};
    serial->eval(std::span<const Runner::Item>(&it2, 1), logits.data());
    const auto t1 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(serial->eval(std::span<const Runner::Item>(&it2, 1), logits.data()), HandoffError);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() >= 0.25);
    serial->eval(std::span<const Runner::Item>(&it2, 1), logits.data());
    CHECK(serial->stats().handoff_timeouts == 1);
}

TEST_CASE("split: the host watchdog restarts the engine and the next request succeeds", "[split][fault]") {
    std::shared_ptr<const Model> m = Model::load(test::to_file(test::tiny_model(synth::Arch::Llama, GgmlType::Q8_0, 4)));
    // Overlap: the stages run on their queues' threads, and the host waits for their
    // events. Serial: each stage runs on the caller's thread, and the alarm releases it.
    const bool overlap = GENERATE(true, false);
    INFO("overlap " << overlap);
    SplitConfig cfg;
    cfg.overlap = overlap;
    cfg.wait_ms = 0;  // no limit: only the watchdog can end the stuck wait
    cfg.host_timeout_ms = 300;
    cfg.drop_window = 1;
    auto r = make_split_runner(m, plan(*m, "cpu:0,cpu:1", "auto"), 1, 32, GgmlType::F16, cfg);
    std::vector<float> logits(static_cast<size_t>(m->hp().n_vocab));
    const std::vector<int32_t> toks = {1, 2, 3};
    const int seq = r->new_sequence();
    const Runner::Item it{seq, toks, false};
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(r->eval(std::span<const Runner::Item>(&it, 1), logits.data()), Catch::Contains("engine restarted"));
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 3.0);
    CHECK(r->stats().restarts == 1);
    CHECK(r->n_past(seq) == 0);  // state rebuilt
    r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
    CHECK(r->n_past(seq) == 3);
}

TEST_CASE("devices: a queue waits for another queue's event as a device operation", "[split][device]") {
    auto a = open_device("cpu:0", 1, 0), b = open_device("cpu:1", 1, 1);
    std::atomic<int> step{0};
    std::atomic<bool> release{false};
    // a: an op held until released, then its event; b: a wait for that event, then an op.
    a->submit([&] {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        step.store(1);
    });
    const DeviceEvent ea = a->record();
    b->wait_event(ea);
    int seen = -1;
    b->submit([&] { seen = step.load(); });
    const DeviceEvent eb = b->record();
    CHECK_FALSE(eb.wait(50));  // b is held by a's event, not done
    CHECK_FALSE(ea.done());
    release.store(true);
    REQUIRE(eb.wait(5000));
    CHECK(seen == 1);  // b's op ran after a's
    eb.rethrow();
    // A failed op on a: b waits for it and goes on; a's event carries the error.
    a->submit([] { throw Error("boom"); });
    const DeviceEvent fail = a->record();
    b->wait_event(fail);
    b->submit([&] { seen = 2; });
    const DeviceEvent eb2 = b->record();
    REQUIRE(eb2.wait(5000));
    CHECK_NOTHROW(eb2.rethrow());
    CHECK(seen == 2);
    CHECK_THROWS_WITH(fail.rethrow(), Catch::Contains("boom"));
}

TEST_CASE("devices: run() is the queue's next item: after what was queued, before what comes later", "[split][device]") {
    auto d = open_device("cpu:0", 2, 0);
    std::atomic<bool> release{false};
    std::vector<int> order;  // written by one item at a time
    d->submit([&] {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        order.push_back(1);
    });
    std::thread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        release.store(true);
    });
    d->run([&] { order.push_back(2); });  // waits for the held item first
    releaser.join();
    d->submit([&] { order.push_back(3); });
    const DeviceEvent ev = d->record();
    REQUIRE(ev.wait(5000));
    CHECK(order == std::vector<int>{1, 2, 3});
    // Its error comes back to the caller; the queue goes on.
    CHECK_THROWS_WITH(d->run([] { throw Error("inline boom"); }), Catch::Contains("inline boom"));
    d->submit([&] { order.push_back(4); });
    const DeviceEvent ev2 = d->record();
    REQUIRE(ev2.wait(5000));
    CHECK_NOTHROW(ev2.rethrow());
    CHECK(order.back() == 4);
}

// Two GPU stages on one card order the reader's wait after the writer's publish by an
// event the writer hands over (Handoff::shared_device; GpuOps uses it). The hand-over
// itself is host code: the event of the window asked for, nothing after an abort or the
// time limit, and a later window's mark does not satisfy an earlier reader with its event.
TEST_CASE("hand-off: the writer's event handed to a reader on the same device", "[split][handoff]") {
    auto dev = open_device("cpu:0", 1, -1);
    Handoff h(*dev, 16);
    int ev1 = 0, ev2 = 0;
    CHECK(h.await_issued(1, 20) == nullptr);  // nothing issued: the time limit
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        h.mark_issued(1, &ev1);
    });
    CHECK(h.await_issued(1, 0) == &ev1);  // no limit: waits for the writer
    writer.join();
    h.mark_issued(2, &ev2);
    CHECK(h.await_issued(2, 10) == &ev2);
    CHECK(h.await_issued(1, 10) == nullptr);  // window 2's event is not window 1's
    h.abort();
    CHECK(h.await_issued(3, 10) == nullptr);  // an abort releases every reader, with no event
    h.mark_issued(4, &ev1);                   // ignored until a reset
    CHECK(h.await_issued(4, 10) == nullptr);
    h.reset();
    CHECK(h.await_issued(1, 10) == nullptr);
    h.mark_issued(1, &ev1);
    CHECK(h.await_issued(1, 10) == &ev1);
}

TEST_CASE("split: a reset sequence keeps its memory and starts over as a new one", "[split][state]") {
    for (auto arch : {synth::Arch::Qwen3Next, synth::Arch::Qwen35, synth::Arch::Llama}) {
        synth::ModelConfig c = synth::make_config(arch, synth::Preset::Tiny);
        c.n_layer = 4;
        c.mtp = c.hybrid();
        std::shared_ptr<const Model> m = Model::load(test::to_file(synth::build_model(c, GgmlType::Q8_0, 7)));
        const std::vector<int32_t> a = {3, 14, 15, 92, 65, 35, 89}, b = {27, 18, 28, 45};
        for (int mode = 0; mode < 3; ++mode) {
            SplitConfig cfg;
            cfg.wait_ms = 10000;
            cfg.pipeline_windows = mode == 2 ? 2 : 1;
            auto r = mode == 0 ? make_local_runner(m, 2, 32, GgmlType::F16)
                               : make_split_runner(m, plan(*m, "cpu:0,cpu:1", "auto"), 1, 32, GgmlType::F16, cfg);
            INFO(synth::arch_name(arch) << " " << r->describe());
            const std::vector<float> fresh = test::run_windows(*r, b);

            // A request that leaves state behind: a prompt, then a verify window undone
            // (a hybrid's state then reads from the snapshot's buffer: StateSnapshot::load).
            const int seq = r->new_sequence();
            const Runner::Item p{seq, a, false};
            r->eval(std::span<const Runner::Item>(&p, 1), nullptr);
            r->snapshot(seq, 4);
            const int32_t window[4] = {7, 1, 8, 2};
            const Runner::Item w{seq, std::span<const int32_t>(window, 4), false};
            r->eval(std::span<const Runner::Item>(&w, 1), nullptr);
            r->restore(seq);
            REQUIRE(r->n_past(seq) == static_cast<int64_t>(a.size()));
            const size_t kept = r->snapshot_bytes();
            CHECK((kept > 0) == m->hp().hybrid());

            r->reset_sequence(seq);
            CHECK(r->n_past(seq) == 0);
            CHECK(r->snapshot_bytes() == kept);  // the memory stays with the slot
            CHECK(test::run_windows_on(*r, seq, b) == fresh);
            r->free_sequence(seq);
        }
    }
}

TEST_CASE("alarm: fires once past its deadline, never after disarm", "[split][alarm]") {
    std::atomic<int> fired{0};
    Alarm alarm([&] { ++fired; }, std::chrono::milliseconds(2));
    alarm.arm(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(fired == 1);  // once, though the deadline stays past
    CHECK(alarm.disarm());

    alarm.arm(std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    CHECK_FALSE(alarm.disarm());
    alarm.arm(std::chrono::milliseconds(5));  // re-armed: the new deadline counts
    CHECK_FALSE(alarm.disarm());              // disarmed in time
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(fired == 1);
}
