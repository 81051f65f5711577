// Every Scratch slot the forward pass uses, in one place, so that no two pieces of code
// that are live at the same time share a buffer by accident. A slot is a grow-only
// buffer of ForwardCtx::scratch (one per device / thread pool).
#pragma once

namespace strata::slot {

enum : int {
    // engine/model/blocks.cpp: attention and the dense FFN
    kAttnQ = 0, kAttnK, kAttnV, kAttnOut, kFfnGate, kFfnUp,
    // engine/model/model.cpp: the window's stream and the rows sent to the LM head
    kHeadRows = 13, kStream = 14,
    // the architectures' layer code (llama.cpp, qwen3next.cpp)
    kLayerNormed = 16, kLayerOut = 17,
    // engine/model/gdn.cpp
    kGdnQkv = 20, kGdnZ, kGdnMixed, kGdnBa, kGdnG, kGdnBeta, kGdnU, kGdnO,
    // engine/model/moe.cpp
    kMoeRouter = 30, kMoeWeights, kMoeRouted, kMoeShared,
    kMoeIds = 0,  // Scratch::ints
    // the MTP block (qwen3next.cpp)
    kMtpEh = 40, kMtpStream, kMtpNormed,
};

}  // namespace strata::slot
