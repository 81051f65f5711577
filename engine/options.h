// Flags shared by every command that runs a model (the CLI's run/eval and the
// server): where the model goes and how it runs, and the sampling defaults. Declared
// once here, parsed once into plain structs.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/flags.h"
#include "engine/run/runner.h"
#include "engine/sample/sampler.h"
#include "engine/split/plan.h"

namespace strata {

struct RunnerOptions {
    std::string model_path;
    std::string mtp_path;  // --mtp-model: an MTP-only sidecar (empty: none)
    int threads = 0;       // 0 = all cores
    int64_t n_ctx = 0;     // 0 = the model's, capped by memory
    GgmlType cache_type = GgmlType::F16;
    int64_t n_batch = 256; // prompt tokens per window
    std::string devices;   // --devices cpu:0,cpu:1 (empty: one CPU device, no split)
    std::string split;     // --split 0-3,4-7 | auto
    int threads_per_device = 0;  // 0 = threads / number of devices
    int pipeline_windows = 0;    // 2: pipelined verify windows on a two-stage split (docs/spec.md)
    // Device budgets and layer streaming (docs/streaming.md).
    std::map<std::string, int64_t> budgets;  // --max-vram: bytes per device (-1: auto)
    int64_t vram_reserve = 0;                // --vram-reserve-mib, in bytes
    bool stream_layers = false;
    int prefetch_depth = 1;
    int64_t max_sequences = 1;  // sequences run at once (the server's slots): state a budget holds
    int64_t n_cpu_moe = 0;      // --cpu-moe (-1) / --n-cpu-moe N: experts in host memory
    size_t moe_cache_bytes = 0; // --moe-cache-mib
    int adapt_every = 0;        // --adapt-every
    int64_t draft_vocab = -1;   // --spec-draft-vocab (0: the whole vocabulary, N, -1: auto; engine/speculative/draft_vocab.h)
};

// --max-vram's list: "cuda:0=10,cuda:1=14GiB,cpu:0=512MiB,cuda:2=auto" (GiB when no unit).
std::map<std::string, int64_t> parse_budgets(const std::string& list);  // throws UsageError

// -m, -t, -c, --cache-type, --batch
std::vector<FlagSpec> runner_flags();
RunnerOptions runner_options(const Flags& f);  // throws UsageError for bad values

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty,
// --frequency-penalty, --penalty-last-n, --seed
std::vector<FlagSpec> sampling_flags();
SamplingParams sampling_options(const Flags& f);

// --spec-draft, --spec-draft-min-p: speculative decoding with the model's MTP head
// (docs/spec.md). Used by `strata run` and the server.
struct SpecFlags {
    int draft = -1;          // drafts per window; 0 = off, -1 = 3 when the model has an MTP head
    float draft_min_p = 0;   // stop a draft chain below this probability
};
std::vector<FlagSpec> spec_flags();
SpecFlags spec_options(const Flags& f);

// The layer split of make_runner for --devices: by the weight bytes each stage holds, or
// for pipelined windows (--pipeline-windows 2, an MTP head, two CPU devices) by what a
// window reads on each stage (docs/spec.md).
SplitPlan runner_plan(const Model& model, const RunnerOptions& o);
// The Runner the options ask for, for an already loaded model.
std::unique_ptr<Runner> make_runner(std::shared_ptr<const Model> model, const RunnerOptions& o);

std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b);

}  // namespace strata
