// PipelineOptions from the STRATA_PIPELINE_* variables.
#include "engine/speculative/pipeline.h"

namespace strata {

PipelineOptions PipelineOptions::from_env(const EnvReader& env) {
    const PipelineOptions d;
    PipelineOptions o;
    o.theta = env.number("STRATA_PIPELINE_THETA", d.theta, 0, 2);
    o.force_miss = static_cast<int>(env.integer("STRATA_PIPELINE_FORCE_MISS", d.force_miss, 0, 2));
    o.doom_skip = env.flag("STRATA_PIPELINE_DOOM_SKIP", d.doom_skip);
    o.prestage = env.flag("STRATA_PIPELINE_PRESTAGE", d.prestage);
    o.snap_overlap = env.flag("STRATA_PIPELINE_SNAP_OVERLAP", d.snap_overlap);
    return o;
}

const PipelineOptions& PipelineOptions::process() {
    static const PipelineOptions o = from_env(EnvReader());
    return o;
}

std::vector<EnvSpec> PipelineOptions::env_specs() {
    const PipelineOptions d;
    return {
        {"STRATA_PIPELINE_THETA", env_default(d.theta),
         "pipelined windows: start window K+1 early only when the draft chain's estimate that it is kept (product of "
         "the draft probabilities) is above this (0 = always, 2 = never)"},
        {"STRATA_PIPELINE_FORCE_MISS", env_default(d.force_miss),
         "test hook: 1 = treat every early window as wrong and roll it back, 2 = every other one"},
        {"STRATA_PIPELINE_DOOM_SKIP", env_default(d.doom_skip),
         "1: an early window known to be wrong stops at its next layer instead of running to the end"},
        {"STRATA_PIPELINE_PRESTAGE", env_default(d.prestage),
         "1: queue window K+1 on stage 0 behind the draft chain (it starts on the device the moment the chain is "
         "done); 0: the host waits for the chain, then queues it"},
        {"STRATA_PIPELINE_SNAP_OVERLAP", env_default(d.snap_overlap),
         "1: state snapshots and restores run as ops on each stage's queue, overlapping the other stage; 0: on the "
         "host, with the stage drained"},
    };
}

}  // namespace strata
