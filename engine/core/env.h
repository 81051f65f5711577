// The one registry of STRATA_* environment variables: each is declared once (name,
// default, one-line doc), parsed once at first use into EnvConfig, listed by
// `strata flags-doc`. No code calls getenv anywhere else.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata {

struct EnvSpec {
    std::string name;
    std::string def;
    std::string doc;
};

struct EnvConfig {
    bool split_overlap = false;       // STRATA_SPLIT_OVERLAP
    int64_t split_wait_ms = 30000;    // STRATA_SPLIT_WAIT_MS (0 = no limit)
    int64_t host_timeout_ms = 20000;  // STRATA_HOST_TIMEOUT_MS (0 = no limit)
    int64_t test_handoff_drop = 0;    // STRATA_TEST_HANDOFF_DROP (0 = off; N = the Nth window)
    // Pipelined verify windows (--pipeline-windows 2, docs/spec.md). Each leaves greedy
    // output unchanged; they change only what runs when.
    double pipeline_theta = 0.25;     // STRATA_PIPELINE_THETA: speculate above this estimate (2 = never)
    int pipeline_force_miss = 0;      // STRATA_PIPELINE_FORCE_MISS: 1 = every guess wrong, 2 = every other
    bool pipeline_doom_skip = true;   // STRATA_PIPELINE_DOOM_SKIP
    bool pipeline_prestage = true;    // STRATA_PIPELINE_PRESTAGE
    bool pipeline_snap_overlap = true;  // STRATA_PIPELINE_SNAP_OVERLAP
};

const std::vector<EnvSpec>& env_specs();
// Parses with a lookup function (tests pass their own); a malformed value is an Error
// naming the variable.
EnvConfig parse_env(const std::function<const char*(const char*)>& lookup);
// The process environment, parsed on first call.
const EnvConfig& env();
std::string env_markdown();

}  // namespace strata
