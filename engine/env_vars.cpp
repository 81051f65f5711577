#include "engine/env_vars.h"

#include "engine/speculative/pipeline.h"
#include "engine/split/split_runner.h"

namespace strata {

std::vector<EnvSpec> env_specs() {
    std::vector<EnvSpec> all = SplitConfig::env_specs();
    for (EnvSpec& s : PipelineOptions::env_specs()) all.push_back(std::move(s));
    return all;
}

std::string env_markdown() { return env_markdown(env_specs()); }

}  // namespace strata
