// Single-sequence generation on one device: prompt in chunks, then token by token.
// The server's scheduler and the split/speculative paths build on the same pieces.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model/model.h"
#include "engine/run/runner.h"
#include "engine/sample/sampler.h"
#include "engine/speculative/pipeline.h"
#include "engine/speculative/speculative.h"
#include "engine/text/tokenizer.h"

namespace strata {

struct GenerateOptions {
    int64_t n_predict = 128;   // tokens to generate at most (-1: until the context is full)
    int64_t n_batch = 256;     // prompt tokens per window
    SamplingParams sampling;
    // Speculative decoding with the model's MTP head (docs/spec.md): drafts per window;
    // 0 = off, -1 = 3 when the model has an MTP head, else off. Requests with penalties
    // decode plainly (the penalties would couple draft and target histories).
    int spec_draft = -1;
    float spec_draft_min_p = 0.0f;  // stop a draft chain below this MTP probability
    // Pipelined windows (when the runner has a stage pipe): null = from the STRATA_PIPELINE_*
    // environment variables.
    std::optional<PipelineOptions> pipeline;
    // When the default K (spec_draft -1) pauses and retries (SpecPolicy); null = the
    // defaults. Tests shorten the backoff.
    std::optional<SpecPolicyParams> spec_policy;
    // Test seam: SpecOptions::edit_draft (forces drafts; random test models accept nothing).
    std::function<void(int64_t pos, int k, Draft&)> spec_edit_draft;
};

struct GenerateStats {
    int64_t n_prompt = 0, n_generated = 0;
    double prompt_seconds = 0, decode_seconds = 0;
    bool stopped_by_eog = false;
    int spec_draft = 0;  // drafts per window (the default: its first K; 0: plain decoding)
    int spec_k_last = 0;        // the default's K at the end (SpecPolicy, "K")
    int64_t spec_k_moves = 0;   // times the default's K moved
    SpecStats spec;      // windows, drafts, acceptance (spec_draft > 0)
    int64_t spec_pauses = 0;       // times the default paused drafting (SpecPolicy)
    int64_t spec_plain_steps = 0;  // plain steps taken while paused
    bool pipelined = false;  // the windows were pipelined (--pipeline-windows 2)
    PipelineStats pipe;      // early windows, kept and rolled back (pipelined)
    double prompt_tps() const { return prompt_seconds > 0 ? static_cast<double>(n_prompt) / prompt_seconds : 0; }
    // decode tok/s counts the tokens after the first (the first comes from the prompt pass)
    double decode_tps() const {
        return decode_seconds > 0 && n_generated > 1 ? static_cast<double>(n_generated - 1) / decode_seconds : 0;
    }
};

// The context length to use: requested, else the model's training context, capped
// so that the KV cache takes at most a quarter of the machine's memory.
int64_t effective_context(const HParams& hp, int64_t requested, GgmlType cache_type);

// Generates after `prompt`. on_text receives each piece of valid UTF-8 as it completes;
// returning false stops generation. End-of-generation tokens stop and are not shown.
GenerateStats generate(Runner& runner, const Tokenizer& tok, std::span<const int32_t> prompt,
                       const GenerateOptions& opt,
                       const std::function<bool(std::string_view)>& on_text,
                       std::vector<int32_t>* out_tokens = nullptr);

}  // namespace strata
