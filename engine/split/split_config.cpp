// SplitConfig from the STRATA_* variables the chain reads.
#include "engine/split/split_runner.h"

namespace strata {

SplitConfig SplitConfig::from_env(const EnvReader& env, int pipeline_windows) {
    constexpr int64_t kDay = 86'400'000;
    const SplitConfig d;
    SplitConfig c;
    c.overlap = env.flag("STRATA_SPLIT_OVERLAP", d.overlap);
    c.wait_ms = env.integer("STRATA_SPLIT_WAIT_MS", d.wait_ms, 0, kDay);
    c.host_timeout_ms = env.integer("STRATA_HOST_TIMEOUT_MS", d.host_timeout_ms, 0, kDay);
    c.drop_window = env.integer("STRATA_TEST_HANDOFF_DROP", d.drop_window, 0, INT64_MAX);
    c.staged_copies = env.flag("STRATA_TEST_DEVICE_COPIES", d.staged_copies);
    c.gpu_graphs = env.flag("STRATA_GPU_GRAPHS", d.gpu_graphs);
    c.gpu_profile = env.flag("STRATA_GPU_PROFILE", d.gpu_profile);
    c.cpu_profile = env.flag("STRATA_CPU_PROFILE", d.cpu_profile);
    c.pipeline_windows = pipeline_windows;
    return c;
}

SplitConfig SplitConfig::process(int pipeline_windows) {
    static const SplitConfig c = from_env(EnvReader());
    SplitConfig out = c;
    out.pipeline_windows = pipeline_windows;
    return out;
}

std::vector<EnvSpec> SplitConfig::env_specs() {
    const SplitConfig d;
    return {
        {"STRATA_SPLIT_OVERLAP", env_default(d.overlap),
         "1: launch every stage's window up front; stages wait on their hand-in flag (stages on different devices only)"},
        {"STRATA_SPLIT_WAIT_MS", env_default(d.wait_ms),
         "bound on each hand-off wait in ms; on expiry the window fails with a hand-off error (0 = no limit)"},
        {"STRATA_HOST_TIMEOUT_MS", env_default(d.host_timeout_ms),
         "a window not done after this many ms restarts the engine (0 = no limit)"},
        {"STRATA_TEST_HANDOFF_DROP", env_default(d.drop_window),
         "test hook: the Nth window's publish leaves the ready flag down (serial, overlap and pipelined windows)"},
        {"STRATA_GPU_GRAPHS", env_default(d.gpu_graphs),
         "1: a GPU stage captures a window's kernels into a graph the second time the same window comes and replays "
         "it after (0: every kernel launched one by one)"},
        {"STRATA_GPU_PROFILE", env_default(d.gpu_profile),
         "1: GPU stages measure the host's time in queue items and waits and, with STRATA_GPU_GRAPHS=0, each "
         "kernel's time; `strata run` prints the table at the end"},
        {"STRATA_CPU_PROFILE", env_default(d.cpu_profile),
         "1: CPU stages time each op by its row count and, for products, the weight's shape (a verify window's "
         "ops against a decode step's); `strata run` prints the table at the end"},
        {"STRATA_TEST_DEVICE_COPIES", env_default(d.staged_copies),
         "test hook: 1 = CPU devices treat host memory as not theirs and copy at a window's edges and hand-offs, as "
         "a GPU must"},
    };
}

}  // namespace strata
