// Which layers go on which device: parsed from --devices and --split, or balanced by
// weight bytes (--split auto). Stage 0 also holds the embedding; the last stage the
// output norm, the LM head and the MTP head.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

class GgufFile;

struct StagePlan {
    std::string device;  // "cpu:0"
    int64_t l0 = 0, l1 = 0;  // layers [l0, l1)
};

struct SplitPlan {
    std::vector<StagePlan> stages;
    std::string describe() const;  // "cpu:0 0-3 | cpu:1 4-7"
};

// devices: comma-separated device names; split: "0-3,4-7" (inclusive ranges, one per
// device, contiguous from layer 0 to the last) or "auto" (or empty). stage_bytes[i]
// are the weight bytes of layer i; head_bytes the output head's, counted on the last
// stage. Refuses a gap, an overlap, a range past the model, more stages than layers,
// or a malformed list, with a clear message. (Device names are checked when opened.)
SplitPlan plan_split(const std::string& devices, const std::string& split, int64_t n_layer,
                     std::span<const uint64_t> layer_bytes, uint64_t head_bytes);

// Weight bytes per main layer (tensors named blk.N.*), and of the output head.
std::vector<uint64_t> layer_weight_bytes(const GgufFile& f, int64_t n_layer);
uint64_t head_weight_bytes(const GgufFile& f);
// Weight bytes one window of `rows` tokens reads per main layer: every tensor once, the
// stacked experts' at the share the rows are expected to route to between them,
// 1 - (1 - n_expert_used / n_expert)^rows (each row's experts drawn independently): a
// verify window's cost per layer, against which a pipelined split balances its stages.
std::vector<uint64_t> layer_window_bytes(const GgufFile& f, int64_t n_layer, int64_t n_expert, int64_t n_expert_used,
                                         int64_t rows);
// Weight bytes one decode step reads: every main layer's tensors, the stacked experts'
// (names with "_exps.") at n_expert_used / n_expert of their bytes (one token's routed
// experts), the output head; not the embedding table (one row per token) nor the MTP
// block. The memory traffic a bandwidth-bound decode is measured against.
uint64_t decode_weight_bytes(const GgufFile& f, int64_t n_layer, int64_t n_expert, int64_t n_expert_used);

}  // namespace strata
