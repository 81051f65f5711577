// Decode speed of one device vs a 2-stage CPU split (serial and overlap), and the
// hand-off latency (publish to the reader's wake) in microseconds.
//
//   split_bench MODEL.gguf [decode_tokens=64] [repeats=3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/core/log.h"
#include "engine/sample/sampler.h"
#include "engine/split/split_runner.h"

using namespace strata;

namespace {

struct Result {
    double tps = 0;
    double wake_us = 0;
};

Result decode(Runner& r, int n_tokens) {
    const int64_t V = r.model().hp().n_vocab;
    std::vector<float> logits(static_cast<size_t>(V));
    const int seq = r.new_sequence();
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    const Runner::Item p{seq, prompt, false};
    r.eval(std::span<const Runner::Item>(&p, 1), logits.data());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_tokens; ++i) {
        const int32_t tok[1] = {argmax(logits)};
        const Runner::Item d{seq, std::span<const int32_t>(tok, 1), false};
        r.eval(std::span<const Runner::Item>(&d, 1), logits.data());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.free_sequence(seq);
    return {n_tokens / s, 0};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    init_logging();
    if (argc < 2) {
        std::fprintf(stderr, "usage: split_bench MODEL.gguf [decode_tokens=64] [repeats=3]\n");
        return 2;
    }
    const int n = argc > 2 ? std::atoi(argv[2]) : 64;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
    std::shared_ptr<const Model> m = Model::load(argv[1]);
    const int64_t L = m->hp().n_layer;
    const SplitPlan plan = plan_split("cpu:0,cpu:1", "auto", L, layer_weight_bytes(m->file(), L), head_weight_bytes(m->file()));
    fmt::print("model {} ({} layers), split {}, {} decode tokens, median of {}\n\n", argv[1], L, plan.describe(), n, reps);
    fmt::print("| mode | decode tok/s | hand-off wake (us, mean) |\n|---|---:|---:|\n");

    std::vector<double> v;
    auto local = make_local_runner(m, 2, 512, GgmlType::F16);
    for (int i = 0; i < reps; ++i) v.push_back(decode(*local, n).tps);
    fmt::print("| one device (cpu:0, 2 threads) | {:.2f} | - |\n", median(v));
    local.reset();

    for (bool overlap : {false, true}) {
        SplitConfig cfg;
        cfg.overlap = overlap;
        auto r = make_split_runner(m, plan, 1, 512, GgmlType::F16, cfg);
        v.clear();
        for (int i = 0; i < reps; ++i) v.push_back(decode(*r, n).tps);
        const SplitStats st = r->stats();
        const double wake = st.handoff_waits ? st.wake_latency_us_sum / static_cast<double>(st.handoff_waits) : 0;
        fmt::print("| 2 stages, {} (1 thread each) | {:.2f} | {:.1f} |\n", overlap ? "overlap" : "serial", median(v), wake);
    }
    return 0;
}
