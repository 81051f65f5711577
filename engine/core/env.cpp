#include "engine/core/env.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata {

const std::vector<EnvSpec>& env_specs() {
    // The defaults are EnvConfig's own (written once, in env.h).
    static const EnvConfig d;
    auto b = [](bool v) { return std::string(v ? "1" : "0"); };
    auto n = [](auto v) { return fmt::format("{}", v); };
    static const std::vector<EnvSpec> specs = {
        {"STRATA_SPLIT_OVERLAP", b(d.split_overlap),
         "1: launch every stage's window up front; stages wait on their hand-in flag (stages on different devices only)"},
        {"STRATA_SPLIT_WAIT_MS", n(d.split_wait_ms), "bound on each hand-off wait in ms; on expiry the window fails with a hand-off error (0 = no limit)"},
        {"STRATA_HOST_TIMEOUT_MS", n(d.host_timeout_ms), "a window not done after this many ms restarts the engine (0 = no limit)"},
        {"STRATA_TEST_HANDOFF_DROP", n(d.test_handoff_drop), "test hook: the Nth window's publish leaves the ready flag down (overlap mode and pipelined windows)"},
        {"STRATA_PIPELINE_THETA", n(d.pipeline_theta),
         "pipelined windows: start window K+1 early only when the draft chain's estimate that it is kept (product of "
         "the draft probabilities) is above this (0 = always, 2 = never)"},
        {"STRATA_PIPELINE_FORCE_MISS", n(d.pipeline_force_miss),
         "test hook: 1 = treat every early window as wrong and roll it back, 2 = every other one"},
        {"STRATA_PIPELINE_DOOM_SKIP", b(d.pipeline_doom_skip),
         "1: an early window known to be wrong stops at its next layer instead of running to the end"},
        {"STRATA_PIPELINE_PRESTAGE", b(d.pipeline_prestage),
         "1: queue window K+1 on stage 0 behind the draft chain (it starts on the device the moment the chain is "
         "done); 0: the host waits for the chain, then queues it"},
        {"STRATA_PIPELINE_SNAP_OVERLAP", b(d.pipeline_snap_overlap),
         "1: state snapshots and restores run as ops on each stage's queue, overlapping the other stage; 0: on the "
         "host, with the stage drained"},
    };
    return specs;
}

namespace {

int64_t parse_int(const char* name, const char* v, int64_t lo, int64_t hi) {
    const std::string s = v;
    int64_t x = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || x < lo || x > hi)
        fail("environment variable {}='{}' must be an integer in {}..{}", name, s, lo, hi);
    return x;
}

double parse_number(const char* name, const char* v, double lo, double hi) {
    const std::string s = v;
    char* end = nullptr;
    const double x = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !(x >= lo && x <= hi))
        fail("environment variable {}='{}' must be a number in {}..{}", name, s, lo, hi);
    return x;
}

}  // namespace

EnvConfig parse_env(const std::function<const char*(const char*)>& lookup) {
    EnvConfig c;
    constexpr int64_t kDay = 86'400'000;
    if (const char* v = lookup("STRATA_SPLIT_OVERLAP")) c.split_overlap = parse_int("STRATA_SPLIT_OVERLAP", v, 0, 1) == 1;
    if (const char* v = lookup("STRATA_SPLIT_WAIT_MS")) c.split_wait_ms = parse_int("STRATA_SPLIT_WAIT_MS", v, 0, kDay);
    if (const char* v = lookup("STRATA_HOST_TIMEOUT_MS")) c.host_timeout_ms = parse_int("STRATA_HOST_TIMEOUT_MS", v, 0, kDay);
    if (const char* v = lookup("STRATA_TEST_HANDOFF_DROP"))
        c.test_handoff_drop = parse_int("STRATA_TEST_HANDOFF_DROP", v, 0, INT64_MAX);
    if (const char* v = lookup("STRATA_PIPELINE_THETA")) c.pipeline_theta = parse_number("STRATA_PIPELINE_THETA", v, 0, 2);
    if (const char* v = lookup("STRATA_PIPELINE_FORCE_MISS"))
        c.pipeline_force_miss = static_cast<int>(parse_int("STRATA_PIPELINE_FORCE_MISS", v, 0, 2));
    if (const char* v = lookup("STRATA_PIPELINE_DOOM_SKIP"))
        c.pipeline_doom_skip = parse_int("STRATA_PIPELINE_DOOM_SKIP", v, 0, 1) == 1;
    if (const char* v = lookup("STRATA_PIPELINE_PRESTAGE"))
        c.pipeline_prestage = parse_int("STRATA_PIPELINE_PRESTAGE", v, 0, 1) == 1;
    if (const char* v = lookup("STRATA_PIPELINE_SNAP_OVERLAP"))
        c.pipeline_snap_overlap = parse_int("STRATA_PIPELINE_SNAP_OVERLAP", v, 0, 1) == 1;
    return c;
}

const EnvConfig& env() {
    static const EnvConfig c = parse_env([](const char* n) { return std::getenv(n); });
    return c;
}

std::string env_markdown() {
    std::string out = "## Environment variables\n\n| variable | default | meaning |\n|---|---|---|\n";
    for (const auto& s : env_specs()) out += fmt::format("| `{}` | `{}` | {} |\n", s.name, s.def, s.doc);
    return out;
}

}  // namespace strata
