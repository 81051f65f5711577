// Qwen3-Next: Gated DeltaNet and gated attention layers with MoE FFN (MODEL_SPEC 4).
#include "engine/core/error.h"
#include "engine/model/model.h"

namespace strata {

std::unique_ptr<Model> make_qwen3next_model(GgufFile file) {
    fail("{}: the qwen3next forward pass is not available in this build yet", file.path());
}

}  // namespace strata
