#include "tools/common.h"

#include <fstream>
#include <sstream>
#include <thread>

namespace strata::cli {

std::vector<FlagSpec> model_flags() {
    return {
        {"--model", "FILE", "", "GGUF model to load", "-m"},
        {"--threads", "N", "0", "CPU threads (0 = all cores)", "-t"},
        {"--ctx-size", "N", "0", "context length (0 = the model's, capped by memory)", "-c"},
        {"--cache-type", "TYPE", "f16", "KV cache type: f16, q8_0 or q4_0"},
        {"--batch", "N", "256", "prompt tokens per window"},
    };
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

bool parse(Flags& f, int argc, char** argv) {
    f.parse(argc, argv);
    if (!f.help()) return true;
    fmt::print("{}", f.help_text());
    return false;
}

std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

int threads_from(const Flags& f) {
    const int64_t t = f.integer("--threads");
    if (t < 0 || t > 1024) throw UsageError(fmt::format("--threads must be in 0..1024, got {}", t));
    return t == 0 ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) : static_cast<int>(t);
}

GgmlType cache_type_from(const Flags& f) {
    const std::string s = f.str("--cache-type");
    if (s == "f16") return GgmlType::F16;
    if (s == "q8_0") return GgmlType::Q8_0;
    if (s == "q4_0") return GgmlType::Q4_0;
    throw UsageError(fmt::format("--cache-type must be f16, q8_0 or q4_0, got '{}'", s));
}

SamplingParams sampling_from(const Flags& f) {
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

std::string prompt_from(const Flags& f) {
    const bool p = f.given("--prompt"), file = f.given("--file");
    if (p == file) throw UsageError("give exactly one of -p PROMPT and -f FILE");
    if (p) return f.str("--prompt");
    std::ifstream in(f.str("--file"), std::ios::binary);
    if (!in) fail("{}: cannot open prompt file", f.str("--file"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace strata::cli
