#include "engine/options.h"

#include <cctype>
#include <thread>

#include <spdlog/spdlog.h>

#include "engine/core/env.h"
#include "engine/generate.h"
#include "engine/speculative/draft_vocab.h"
#include "engine/speculative/pipeline.h"
#include "engine/split/split_runner.h"

namespace strata {

std::vector<FlagSpec> runner_flags() {
    return {
        {"--model", "FILE", "", "GGUF model to load", "-m"},
        {"--mtp-model", "FILE", "",
         "the MTP block of a qwen3next / qwen35 / qwen35moe model written apart from it (an MTP-only file, as "
         "llama.cpp's converter writes with --mtp), for speculative decoding"},
        {"--threads", "N", "0", "CPU threads (0 = all cores)", "-t"},
        {"--ctx-size", "N", "0", "context length per sequence (0 = the model's, capped by memory)", "-c"},
        {"--cache-type", "TYPE", "f16", "KV cache type: f16, q8_0 or q4_0"},
        {"--batch", "N", "256", "prompt tokens per window"},
        {"--devices", "LIST", "", "devices for a layer split, e.g. cpu:0,cpu:1 (empty: one device)"},
        {"--split", "RANGES", "auto", "layer ranges per device, e.g. 0-3,4-7, or auto (balanced by the weight bytes each stage holds; with --pipeline-windows 2, by what a window reads on each)"},
        {"--threads-per-device", "N", "0", "threads of each split device (0 = --threads / number of devices)"},
        {"--pipeline-windows", "N", "0",
         "2: on a two-stage split, stage 0 starts the next speculative verify window while stage 1 verifies the "
         "current one (0 = off)"},
        {"--max-vram", "LIST", "",
         "device memory budgets, e.g. cuda:0=10,cuda:1=14GiB or cpu:0=512MiB (GiB when no unit; auto = the "
         "device's free memory): weights, state and buffers stay within them"},
        {"--vram-reserve-mib", "N", "0",
         "MiB of every --max-vram budget the placement leaves free for what the runtime allocates beside it"},
        {"--stream-layers", "", "", "under --max-vram, keep the leading layers that fit on the device and stream the "
                                    "others from host memory before each use"},
        {"--layer-prefetch-depth", "N", "1",
         "streamed layers: 1 = copy the next layer while the current one computes, 0 = copy each when its turn comes"},
        {"--cpu-moe", "", "", "keep the experts of every MoE layer in host memory and compute them on the CPU"},
        {"--n-cpu-moe", "N", "0", "keep the experts of the first N MoE layers in host memory (computed on the CPU)"},
        {"--moe-cache-mib", "N", "0",
         "with experts in host memory: MiB of each device for a cache of the hot experts, computed there"},
        {"--spec-draft-vocab", "N|auto", "auto",
         "speculative decoding: the MTP head drafts from the first N token ids only (rounded up to 256; a "
         "tokenizer's lower ids are its more frequent tokens), so each draft step reads N rows of the LM head "
         "instead of all; verification keeps the whole vocabulary (0 = all; auto = from 4096 ids, doubled "
         "whenever more than 1 in 64 of the last 256 tokens lie past them)"},
        {"--adapt-every", "W", "0",
         "re-rank the cache of hot experts every W windows from the routing counts (0 = rank once, after the first)"},
    };
}

RunnerOptions runner_options(const Flags& f) {
    RunnerOptions o;
    o.model_path = f.str("--model");
    o.mtp_path = f.str("--mtp-model");
    const int64_t t = f.integer_in("--threads", 0, 1024);
    o.threads = t == 0 ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) : static_cast<int>(t);
    o.n_ctx = f.integer_in("--ctx-size", 0, int64_t{1} << 32);
    const std::string ct = f.str("--cache-type");
    if (ct == "f16") o.cache_type = GgmlType::F16;
    else if (ct == "q8_0") o.cache_type = GgmlType::Q8_0;
    else if (ct == "q4_0") o.cache_type = GgmlType::Q4_0;
    else throw UsageError(fmt::format("--cache-type must be f16, q8_0 or q4_0, got '{}'", ct));
    o.n_batch = f.integer_in("--batch", 1, 1 << 20);
    o.devices = f.str("--devices");
    o.split = f.str("--split");
    if (f.given("--split") && o.devices.empty()) throw UsageError("--split needs --devices");
    o.threads_per_device = static_cast<int>(f.integer_in("--threads-per-device", 0, 1024));
    o.pipeline_windows = static_cast<int>(f.integer_in("--pipeline-windows", 0, 2));
    if (o.pipeline_windows == 1) throw UsageError("--pipeline-windows must be 0 (off) or 2");
    o.budgets = parse_budgets(f.str("--max-vram"));
    o.vram_reserve = f.integer_in("--vram-reserve-mib", 0, int64_t{1} << 24) << 20;
    o.stream_layers = f.on("--stream-layers");
    o.prefetch_depth = static_cast<int>(f.integer_in("--layer-prefetch-depth", 0, 1));
    if (o.budgets.empty() && (o.stream_layers || f.given("--layer-prefetch-depth") || f.given("--vram-reserve-mib")))
        throw UsageError("--stream-layers, --layer-prefetch-depth and --vram-reserve-mib need --max-vram");
    if (f.on("--cpu-moe") && f.given("--n-cpu-moe")) throw UsageError("give one of --cpu-moe and --n-cpu-moe");
    o.n_cpu_moe = f.on("--cpu-moe") ? -1 : f.integer_in("--n-cpu-moe", 0, 1 << 20);
    o.moe_cache_bytes = static_cast<size_t>(f.integer_in("--moe-cache-mib", 0, int64_t{1} << 24)) << 20;
    o.adapt_every = static_cast<int>(f.integer_in("--adapt-every", 0, 1 << 20));
    o.draft_vocab = f.str("--spec-draft-vocab") == "auto" ? -1 : f.integer_in("--spec-draft-vocab", 0, int64_t{1} << 24);
    if (o.n_cpu_moe == 0 && (o.moe_cache_bytes > 0 || f.given("--adapt-every")))
        throw UsageError("--moe-cache-mib and --adapt-every need --cpu-moe or --n-cpu-moe");
    return o;
}

std::map<std::string, int64_t> parse_budgets(const std::string& list) {
    std::map<std::string, int64_t> out;
    size_t pos = 0;
    while (pos < list.size()) {
        size_t end = list.find(',', pos);
        if (end == std::string::npos) end = list.size();
        const std::string item = list.substr(pos, end - pos);
        pos = end + 1;
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
            throw UsageError(fmt::format("--max-vram: '{}' is not DEVICE=SIZE (e.g. cuda:0=10GiB)", item));
        const std::string dev = item.substr(0, eq), size = item.substr(eq + 1);
        if (out.count(dev)) throw UsageError(fmt::format("--max-vram names {} twice", dev));
        if (size == "auto") {
            out[dev] = -1;
            continue;
        }
        size_t digits = 0;
        while (digits < size.size() && (std::isdigit(static_cast<unsigned char>(size[digits])) || size[digits] == '.'))
            ++digits;
        std::string unit = size.substr(digits);
        for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        double scale = 0;
        if (unit.empty() || unit == "g" || unit == "gib" || unit == "gb") scale = 1024.0 * 1024.0 * 1024.0;
        else if (unit == "m" || unit == "mib" || unit == "mb") scale = 1024.0 * 1024.0;
        double v = 0;
        try {
            size_t used = 0;
            v = digits > 0 ? std::stod(size.substr(0, digits), &used) : 0;
            if (used != digits) scale = 0;
        } catch (const std::exception&) {
            scale = 0;
        }
        if (scale == 0 || !(v > 0) || v * scale > 9.0e18)
            throw UsageError(fmt::format("--max-vram {}: '{}' is not a size (e.g. 10, 10GiB, 512MiB or auto)", dev, size));
        out[dev] = static_cast<int64_t>(v * scale);
    }
    return out;
}

std::vector<FlagSpec> sampling_flags() {
    return {
        {"--temp", "T", "0", "temperature (0 = greedy)"},
        {"--top-k", "K", "0", "keep the K most likely tokens (0 = off)"},
        {"--top-p", "P", "1", "keep the smallest set with probability mass P (1 = off)"},
        {"--min-p", "P", "0", "drop tokens below P times the top probability (0 = off)"},
        {"--repeat-penalty", "X", "1", "divide logits of recent tokens by X (1 = off)"},
        {"--presence-penalty", "X", "0", "subtract X from logits of recent tokens"},
        {"--frequency-penalty", "X", "0", "subtract X times the count of each recent token"},
        {"--penalty-last-n", "N", "64", "recent tokens the penalties look at (-1 = all)"},
        {"--seed", "S", "0", "random seed for sampling"},
    };
}

SamplingParams sampling_options(const Flags& f) {
    SamplingParams p;
    p.temperature = static_cast<float>(f.number("--temp"));
    p.top_k = static_cast<int32_t>(f.integer("--top-k"));
    p.top_p = static_cast<float>(f.number("--top-p"));
    p.min_p = static_cast<float>(f.number("--min-p"));
    p.repeat_penalty = static_cast<float>(f.number("--repeat-penalty"));
    p.presence_penalty = static_cast<float>(f.number("--presence-penalty"));
    p.frequency_penalty = static_cast<float>(f.number("--frequency-penalty"));
    p.penalty_last_n = static_cast<int32_t>(f.integer("--penalty-last-n"));
    p.seed = static_cast<uint64_t>(f.integer("--seed"));
    try {
        p.validate();
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
    return p;
}

std::vector<FlagSpec> spec_flags() {
    return {
        {"--spec-draft", "K", "-1",
         "speculative decoding: K draft tokens per window from the model's MTP head (0 = off, -1 = the default "
         "when the model has one: 3, paused while its drafts are not kept, and for greedy requests with serial "
         "windows moved within 1..8 by the windows' measured rate)"},
        {"--spec-draft-min-p", "P", "0", "stop a draft chain when the MTP's probability of the draft is below P"},
    };
}

SpecFlags spec_options(const Flags& f) {
    SpecFlags s;
    const int64_t k = f.integer("--spec-draft");
    if (k < -1 || k > 16) throw UsageError(fmt::format("--spec-draft must be in -1..16, got {}", k));
    s.draft = static_cast<int>(k);
    s.draft_min_p = static_cast<float>(f.number("--spec-draft-min-p"));
    if (!(s.draft_min_p >= 0.0f && s.draft_min_p <= 1.0f))
        throw UsageError(fmt::format("--spec-draft-min-p must be in [0, 1], got {}", s.draft_min_p));
    return s;
}

namespace {

SplitConfig placement_config(SplitConfig c, const RunnerOptions& o) {
    c.budgets = o.budgets;
    c.vram_reserve = o.vram_reserve;
    c.stream_layers = o.stream_layers;
    c.prefetch_depth = o.prefetch_depth;
    c.max_sequences = o.max_sequences;
    c.max_rows = o.n_batch + o.max_sequences;  // a prompt chunk beside the other slots' decode rows
    c.n_cpu_moe = o.n_cpu_moe;
    c.moe_cache_bytes = o.moe_cache_bytes;
    c.adapt_every = o.adapt_every;
    c.draft_vocab = o.draft_vocab;
    return c;
}

}  // namespace

SplitPlan runner_plan(const Model& model, const RunnerOptions& o) {
    const HParams& hp = model.hp();
    const int64_t n_layer = hp.n_layer;
    const bool auto_split = o.split.empty() || o.split == "auto";
    SplitPlan plan = plan_split(o.devices, o.split, n_layer, layer_weight_bytes(model.file(), n_layer),
                                head_weight_bytes(model.file()));
    const bool pipelined = o.pipeline_windows == 2 && model.has_mtp() && plan.stages.size() == 2 &&
                           plan.stages[0].device != plan.stages[1].device;  // where the pipeline turns itself on
    if (pipelined && auto_split) {
        // Pipelined windows keep both stages busy at once, so the split balances the time
        // of a window on each (the weight bytes it reads: a verify window's rows' share of
        // the experts; on the last stage the head and the draft chain too), not the weights
        // each holds: a serial split's stages take turns, so there only the memory matters.
        const int k = SpecOptions{}.k;
        const std::vector<uint64_t> window = layer_window_bytes(model.file(), n_layer, hp.n_expert,
                                                                hp.n_expert_used, k + 1);
        const std::vector<uint64_t> step = layer_window_bytes(model.file(), n_layer, hp.n_expert, hp.n_expert_used, 1);
        uint64_t mean = 0;
        for (uint64_t b : step) mean += b / static_cast<uint64_t>(n_layer);
        const int64_t draft_rows = o.draft_vocab > 0 ? o.draft_vocab
                                   : o.draft_vocab == 0 ? hp.n_vocab
                                                        : DraftVocab::kAutoStart;
        const uint64_t last = PipelinedDecoder::last_stage_bytes(head_weight_bytes(model.file()), mean, draft_rows,
                                                                 hp.n_vocab, k);
        SplitPlan timed = plan_split(o.devices, o.split, n_layer, window, last);
        // A GPU's memory is its own: moving layers onto a stage may take it past what the
        // card holds, so there the split stays the one by held bytes, and the log names
        // the other. CPU stages share the host's memory.
        const bool host = plan.stages[0].device.rfind("cpu", 0) == 0 && plan.stages[1].device.rfind("cpu", 0) == 0;
        if (host) {
            plan = std::move(timed);
            spdlog::info("split: {} (auto, pipelined windows: balanced by what a window of {} rows reads on each stage)",
                         plan.describe(), k + 1);
        } else if (timed.describe() != plan.describe()) {
            spdlog::info("split: {} (auto: balanced by the weight bytes each stage holds); pipelined windows would "
                         "balance their time with --split {}-{},{}-{}, where the memory allows",
                         plan.describe(), timed.stages[0].l0, timed.stages[0].l1 - 1, timed.stages[1].l0,
                         timed.stages[1].l1 - 1);
        }
    } else if (auto_split) {
        spdlog::debug("split: {} (auto: balanced by the weight bytes each stage holds)", plan.describe());
    }
    return plan;
}

std::unique_ptr<Runner> make_runner(std::shared_ptr<const Model> model, const RunnerOptions& o) {
    const int64_t n_ctx = effective_context(model->hp(), o.n_ctx, o.cache_type);
    if (o.devices.empty()) {
        if (o.pipeline_windows == 2) spdlog::info("pipelined windows are off: there is no layer split (--devices)");
        SplitConfig cfg = placement_config(SplitConfig::process(), o);
        return make_local_runner(std::move(model), o.threads, n_ctx, o.cache_type, cfg);
    }
    const SplitPlan plan = runner_plan(*model, o);
    const int n_dev = static_cast<int>(plan.stages.size());
    const int tpd = o.threads_per_device > 0 ? o.threads_per_device : std::max(1, o.threads / n_dev);
    return make_split_runner(std::move(model), plan, tpd, n_ctx, o.cache_type,
                             placement_config(SplitConfig::process(o.pipeline_windows), o));
}

std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace strata
