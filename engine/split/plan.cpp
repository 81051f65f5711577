#include "engine/split/plan.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"

namespace strata {
namespace {

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

int64_t parse_layer(const std::string& s, const std::string& range) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0)
        fail("--split: '{}' is not a layer range like 0-3", range);
    return v;
}

// Contiguous ranges of layers minimizing the largest stage's bytes (the stage every
// token waits for); the head counts on the last stage. n_layer is small: O(k n^2).
std::vector<int64_t> balance(std::span<const uint64_t> bytes, uint64_t head, size_t k) {
    const size_t n = bytes.size();
    std::vector<uint64_t> pre(n + 1, 0);
    for (size_t i = 0; i < n; ++i) pre[i + 1] = pre[i] + bytes[i];
    const uint64_t inf = std::numeric_limits<uint64_t>::max();
    // best[j][i]: minimal max-cost of the first i layers cut into j stages (the last of
    // which ends at i); cut[j][i] the start of that last stage.
    std::vector<std::vector<uint64_t>> best(k + 1, std::vector<uint64_t>(n + 1, inf));
    std::vector<std::vector<size_t>> cut(k + 1, std::vector<size_t>(n + 1, 0));
    best[0][0] = 0;
    for (size_t j = 1; j <= k; ++j)
        for (size_t i = j; i <= n; ++i)
            for (size_t s = j - 1; s < i; ++s) {
                if (best[j - 1][s] == inf) continue;
                uint64_t stage = pre[i] - pre[s] + (j == k && i == n ? head : 0);
                const uint64_t c = std::max(best[j - 1][s], stage);
                if (c < best[j][i]) {
                    best[j][i] = c;
                    cut[j][i] = s;
                }
            }
    std::vector<int64_t> starts(k);
    size_t i = n;
    for (size_t j = k; j >= 1; --j) {
        starts[j - 1] = static_cast<int64_t>(cut[j][i]);
        i = cut[j][i];
    }
    return starts;
}

}  // namespace

std::string SplitPlan::describe() const {
    std::string s;
    for (size_t i = 0; i < stages.size(); ++i)
        s += fmt::format("{}{} layers {}-{}", i ? " | " : "", stages[i].device, stages[i].l0, stages[i].l1 - 1);
    return s;
}

SplitPlan plan_split(const std::string& devices, const std::string& split, int64_t n_layer,
                     std::span<const uint64_t> layer_bytes, uint64_t head_bytes) {
    const auto devs = split_list(devices);
    for (const auto& d : devs)
        if (d.empty()) fail("--devices: empty device name in '{}'", devices);
    const int64_t k = static_cast<int64_t>(devs.size());
    if (k > n_layer) fail("--devices: {} stages for a model with only {} layers", k, n_layer);
    SplitPlan plan;
    if (split.empty() || split == "auto") {
        STRATA_CHECK(static_cast<int64_t>(layer_bytes.size()) == n_layer, "layer_bytes has {} entries for {} layers",
                     layer_bytes.size(), n_layer);
        const auto starts = balance(layer_bytes, head_bytes, static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i)
            plan.stages.push_back({devs[i], starts[i], i + 1 < k ? starts[i + 1] : n_layer});
        return plan;
    }
    const auto ranges = split_list(split);
    if (static_cast<int64_t>(ranges.size()) != k)
        fail("--split has {} ranges but --devices names {} devices", ranges.size(), k);
    int64_t next = 0;
    for (int64_t i = 0; i < k; ++i) {
        const std::string& r = ranges[i];
        const size_t dash = r.find('-');
        if (dash == std::string::npos) fail("--split: '{}' is not a layer range like 0-3", r);
        const int64_t a = parse_layer(r.substr(0, dash), r), b = parse_layer(r.substr(dash + 1), r);
        if (a > b) fail("--split: range '{}' runs backwards", r);
        if (b >= n_layer) fail("--split: range '{}' goes past the model's last layer {}", r, n_layer - 1);
        if (a > next) fail("--split: layers {}-{} are in no range (gap before '{}')", next, a - 1, r);
        if (a < next) fail("--split: range '{}' overlaps the previous one (layer {} is already placed)", r, a);
        plan.stages.push_back({devs[i], a, b + 1});
        next = b + 1;
    }
    if (next != n_layer) fail("--split: layers {}-{} are in no range", next, n_layer - 1);
    return plan;
}

namespace {

// The main layer a tensor belongs to (blk.N.*, N < n_layer), or -1.
int64_t layer_of(const std::string& name, int64_t n_layer) {
    if (name.rfind("blk.", 0) != 0) return -1;
    int64_t il = -1;
    auto [p, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), il);
    return ec == std::errc() && il >= 0 && il < n_layer ? il : -1;
}

// Bytes per main layer: every tensor's, the stacked experts' (names with "_exps.")
// times `share` (the part of them a token or a window reads), in double so that a sum
// over layers rounds once.
std::vector<double> layer_bytes(const GgufFile& f, int64_t n_layer, int64_t n_expert, double share) {
    std::vector<double> bytes(static_cast<size_t>(n_layer), 0.0);
    for (const auto& t : f.tensors()) {
        const int64_t il = layer_of(t.name, n_layer);
        if (il < 0) continue;
        const bool experts = n_expert > 0 && t.name.find("_exps.") != std::string::npos;
        bytes[static_cast<size_t>(il)] += static_cast<double>(t.nbytes) * (experts ? share : 1.0);
    }
    return bytes;
}

std::vector<uint64_t> rounded(const std::vector<double>& v) {
    std::vector<uint64_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<uint64_t>(v[i]);
    return out;
}

}  // namespace

std::vector<uint64_t> layer_weight_bytes(const GgufFile& f, int64_t n_layer) {
    return rounded(layer_bytes(f, n_layer, 0, 1.0));
}

uint64_t head_weight_bytes(const GgufFile& f) {
    const GgufTensorInfo* t = f.find_tensor("output.weight");
    if (!t) t = f.find_tensor("token_embd.weight");
    return t ? t->nbytes : 0;
}

std::vector<uint64_t> layer_window_bytes(const GgufFile& f, int64_t n_layer, int64_t n_expert, int64_t n_expert_used,
                                         int64_t rows) {
    STRATA_CHECK(rows >= 1, "a window of {} rows", rows);
    const double one = n_expert > 0 ? static_cast<double>(n_expert_used) / static_cast<double>(n_expert) : 1.0;
    return rounded(layer_bytes(f, n_layer, n_expert, 1.0 - std::pow(1.0 - one, static_cast<double>(rows))));
}

uint64_t decode_weight_bytes(const GgufFile& f, int64_t n_layer, int64_t n_expert, int64_t n_expert_used) {
    const double share = n_expert > 0 ? static_cast<double>(n_expert_used) / static_cast<double>(n_expert) : 1.0;
    double bytes = static_cast<double>(head_weight_bytes(f));
    for (double b : layer_bytes(f, n_layer, n_expert, share)) bytes += b;
    return static_cast<uint64_t>(bytes);
}

}  // namespace strata
