// The tensor list of a synthetic model: names, shapes (ggml order), storage types
// and how each tensor is initialized, exactly as llama.cpp names them for the
// architecture (MODEL_SPEC 3.2, 5.2, 5.5). No data is generated here, so tests can
// check the plan of a 1B preset without allocating a gigabyte.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/quant/types.h"
#include "engine/synth/presets.h"

namespace strata::synth {

enum class Init {
    Matrix,     // N(0, 1/fan_in), fan_in = ne[0]: keeps activations at unit scale
    ResidOut,   // Matrix further scaled by 1/sqrt(2 n_layer): writes into the residual stream
    Embedding,  // N(0, 1): unit-RMS rows, the scale a normalized hidden state has
    Norm,       // 1 + N(0, 0.02^2)
    SsmA,       // -exp(A_log), A_log ~ U(ln 1, ln 16)   (HF init: A ~ U(1, 16))
    SsmDtBias,  // softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (HF/Mamba init)
    Conv,       // U(-1/sqrt(K), 1/sqrt(K)): PyTorch's conv1d default, fan_in = K
    RopeFreqs,  // log-uniform in [1, 8]: divisors of the rotary angles, as llama3's scaling gives
    Derived,    // written by the predictable construction (predictable.h), not drawn alone
};

struct TensorPlan {
    std::string name;
    std::vector<int64_t> ne;  // ggml order, fastest first
    GgmlType type = GgmlType::F32;
    Init init = Init::Matrix;
    bool weight_matrix = false;  // a target of --type (else always F32)

    int64_t n_elements() const;
};

struct ModelPlan {
    std::vector<TensorPlan> tensors;
    // One line per fallback (type, row length) group, e.g. "3 tensors ... use q8_0".
    std::vector<std::string> notes;
};

// Types a weight matrix of this row length can be stored in: `want` when the row is
// a whole number of blocks, else q8_0 when it is a multiple of 32, else f16 (what
// llama.cpp's quantizer does when a type does not fit, simplified).
GgmlType fit_type(GgmlType want, int64_t row_len);

ModelPlan plan_tensors(const ModelConfig& c, GgmlType weight_type);

// Number of weights (all tensors, MTP block included).
int64_t count_params(const ModelConfig& c);

}  // namespace strata::synth
