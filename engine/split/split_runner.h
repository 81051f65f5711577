// The stage chain: a Runner whose layers are split into contiguous stages on several
// devices, handing activations across each boundary through a Handoff.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "engine/core/env.h"
#include "engine/core/error.h"
#include "engine/run/runner.h"
#include "engine/split/plan.h"
#include "engine/split/stage_pipe.h"

namespace strata {

// The chain's settings. The defaults here are the STRATA_* variables' defaults.
struct SplitConfig {
    bool overlap = false;             // STRATA_SPLIT_OVERLAP
    int64_t wait_ms = 30000;          // STRATA_SPLIT_WAIT_MS (0 = no limit)
    int64_t host_timeout_ms = 20000;  // STRATA_HOST_TIMEOUT_MS (0 = no limit)
    int64_t drop_window = 0;          // STRATA_TEST_HANDOFF_DROP (0 = off; N = the Nth window)
    bool staged_copies = false;       // STRATA_TEST_DEVICE_COPIES: CPU devices copy as a GPU must
    bool gpu_graphs = true;           // STRATA_GPU_GRAPHS: GPU stages replay their windows as graphs
    bool gpu_profile = false;         // STRATA_GPU_PROFILE: GPU stages time the host's part and each kernel
    bool cpu_profile = false;         // STRATA_CPU_PROFILE: CPU stages time each op
    int pipeline_windows = 0;  // --pipeline-windows: 2 = the stage pipe (StagePipe) is available
    // Tests: overlap and pipelined windows also when two stages share a device (each stage
    // has its own stream on a GPU, so one card runs the whole matrix: tools/gpu-check.sh).
    bool shared_device_overlap = false;
    // Device budgets (--max-vram; engine/model/placement.h): bytes per device spec (-1:
    // auto, the device's memory less the reserve). A stage on a device without one
    // reads its weights where its backend keeps them, unbounded.
    std::map<std::string, int64_t> budgets;
    int64_t vram_reserve = 0;     // --vram-reserve-mib, in bytes: held back from every budget
    bool stream_layers = false;   // --stream-layers
    int prefetch_depth = 1;       // --layer-prefetch-depth
    int64_t max_sequences = 1;    // sequences whose state a budget makes room for
    int64_t max_rows = 256;       // the largest window (--batch)
    // Experts in host memory (engine/model/host_experts.h): the first n_cpu_moe MoE layers'
    // (-1: all; --cpu-moe, --n-cpu-moe), a device cache of hot ones (--moe-cache-mib, per
    // device, in bytes) re-ranked every adapt_every windows (--adapt-every; 0 = once).
    int64_t n_cpu_moe = 0;
    size_t moe_cache_bytes = 0;
    int adapt_every = 0;
    int64_t draft_vocab = 0;  // --spec-draft-vocab, for the drafters (Runner::draft_vocab; 0: all, N, -1: auto)

    static SplitConfig from_env(const EnvReader& env, int pipeline_windows = 0);
    // The process environment's, parsed on first use.
    static SplitConfig process(int pipeline_windows = 0);
    static std::vector<EnvSpec> env_specs();
};

struct SplitStats {
    int64_t windows = 0;
    int64_t handoff_waits = 0;     // waits that saw their flag
    int64_t handoff_timeouts = 0;  // waits that ran out (or were aborted)
    int64_t restarts = 0;          // watchdog restarts
    double wake_latency_us_sum = 0;  // publish -> wake, summed over waits (overlap mode)
};

class SplitRunner : public Runner {
public:
    virtual bool overlap() const = 0;  // whether the overlap mode is on (after its own checks)
    virtual SplitStats stats() const = 0;
    // Stage-level control for pipelined verify windows (--pipeline-windows 2): non-null
    // only for a two-stage split on two devices that was asked for it.
    virtual StagePipe* stage_pipe() = 0;
    Stats runner_stats() const override {
        const SplitStats s = stats();
        return {s.handoff_waits, s.handoff_timeouts, s.restarts};
    }
};

// The stage pipe of r when r is a split runner that has one, else null (the layers
// above the split ask through this; the Runner interface knows nothing of stages).
StagePipe* stage_pipe_of(Runner& r);

// A runner on one CPU device (cpu:0) with `threads` threads: the chain of one stage.
// No host watchdog: with no hand-off to wait for, a long window is only a long window.
std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type);
// The same with the chain's settings given (a budget for cpu:0, streaming).
std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type, SplitConfig cfg);

// threads_per_device threads for each device; devices are opened here (cpu:N).
std::unique_ptr<SplitRunner> make_split_runner(std::shared_ptr<const Model> model, const SplitPlan& plan,
                                               int threads_per_device, int64_t n_ctx, GgmlType cache_type,
                                               const SplitConfig& cfg);

}  // namespace strata
