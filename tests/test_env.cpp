// The STRATA_* variables: each layer parses its own through EnvReader, defaults written
// once (the options' own), malformed values refused with the variable's name, and the
// one list flags-doc prints holds each variable once with its real default.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

#include "engine/env_vars.h"
#include "engine/speculative/pipeline.h"
#include "engine/split/split_runner.h"

using namespace strata;

namespace {

EnvReader lookup(std::map<std::string, std::string> vars) {
    return EnvReader([vars = std::move(vars)](const char* n) -> const char* {
        auto it = vars.find(n);
        return it == vars.end() ? nullptr : it->second.c_str();
    });
}

}  // namespace

TEST_CASE("env: the chain's and the pipeline's variables parse, unset ones keep the defaults", "[env]") {
    const SplitConfig s = SplitConfig::from_env(
        lookup({{"STRATA_SPLIT_OVERLAP", "1"}, {"STRATA_SPLIT_WAIT_MS", "250"}, {"STRATA_GPU_GRAPHS", "0"}}), 2);
    CHECK(s.overlap);
    CHECK_FALSE(s.gpu_graphs);
    CHECK(SplitConfig{}.gpu_graphs);
    CHECK(s.wait_ms == 250);
    CHECK(s.host_timeout_ms == SplitConfig{}.host_timeout_ms);
    CHECK(s.pipeline_windows == 2);
    const PipelineOptions p =
        PipelineOptions::from_env(lookup({{"STRATA_PIPELINE_THETA", "0.5"}, {"STRATA_PIPELINE_DOOM_SKIP", "0"}}));
    CHECK(p.theta == 0.5);
    CHECK(!p.doom_skip);
    CHECK(p.prestage == PipelineOptions{}.prestage);
}

TEST_CASE("env: a malformed or out-of-range value is an error naming the variable", "[env]") {
    CHECK_THROWS_WITH(SplitConfig::from_env(lookup({{"STRATA_SPLIT_WAIT_MS", "soon"}})),
                      Catch::Contains("STRATA_SPLIT_WAIT_MS='soon'") && Catch::Contains("integer"));
    CHECK_THROWS_WITH(SplitConfig::from_env(lookup({{"STRATA_SPLIT_OVERLAP", "2"}})),
                      Catch::Contains("STRATA_SPLIT_OVERLAP"));
    CHECK_THROWS_WITH(SplitConfig::from_env(lookup({{"STRATA_HOST_TIMEOUT_MS", "-1"}})),
                      Catch::Contains("STRATA_HOST_TIMEOUT_MS"));
    CHECK_THROWS_WITH(PipelineOptions::from_env(lookup({{"STRATA_PIPELINE_THETA", "3"}})),
                      Catch::Contains("STRATA_PIPELINE_THETA") && Catch::Contains("number"));
    CHECK_THROWS_WITH(PipelineOptions::from_env(lookup({{"STRATA_PIPELINE_THETA", ""}})),
                      Catch::Contains("STRATA_PIPELINE_THETA"));
}

TEST_CASE("env: the one list names each variable once, with the default the code uses", "[env]") {
    const std::vector<EnvSpec> specs = env_specs();
    std::set<std::string> names;
    for (const EnvSpec& s : specs) {
        CHECK(names.insert(s.name).second);
        CHECK(s.name.rfind("STRATA_", 0) == 0);
        CHECK(!s.doc.empty());
    }
    // Each documented default, set explicitly, parses to what an unset variable gives.
    std::map<std::string, std::string> all;
    for (const EnvSpec& s : specs) all[s.name] = s.def;
    const SplitConfig a = SplitConfig::from_env(lookup(all)), b;
    CHECK((a.overlap == b.overlap && a.wait_ms == b.wait_ms && a.host_timeout_ms == b.host_timeout_ms &&
           a.drop_window == b.drop_window && a.staged_copies == b.staged_copies && a.gpu_graphs == b.gpu_graphs &&
           a.gpu_profile == b.gpu_profile && a.cpu_profile == b.cpu_profile));
    const PipelineOptions c = PipelineOptions::from_env(lookup(all)), d;
    CHECK((c.theta == d.theta && c.force_miss == d.force_miss && c.doom_skip == d.doom_skip &&
           c.prestage == d.prestage && c.snap_overlap == d.snap_overlap));
    CHECK(names.size() == 13);
}
