// A copy of the part of a sequence's state that a verify window cannot simply forget:
// its length and its Gated DeltaNet state (conv history + delta-rule state). KV
// entries past n_past are overwritten by the next window, so they are not copied
// (MODEL_SPEC 4.10, option (b): keep the state from before the window, replay the
// accepted tokens).
#pragma once
#include <cstddef>
#include <memory>

#include "engine/core/error.h"
#include "engine/state/seq_state.h"

namespace strata {

class StateSnapshot {
public:
    // The first save allocates (one GdnState's worth); later saves copy into it.
    void save(const SeqState& s) {
        n_past_ = s.n_past;
        if (s.gdn) {
            if (!gdn_) gdn_ = std::make_unique<GdnState>(*s.gdn);
            else *gdn_ = *s.gdn;  // same shape: vector assignment reuses the storage
        }
        valid_ = true;
    }
    void load(SeqState& s) const {
        STRATA_CHECK(valid_, "restore without a snapshot");
        s.n_past = n_past_;
        if (s.gdn) *s.gdn = *gdn_;
    }
    bool valid() const { return valid_; }
    void invalidate() { valid_ = false; }  // the sequence was reset: keep the buffer, not the data
    size_t bytes() const { return gdn_ ? gdn_->bytes() : 0; }

private:
    bool valid_ = false;
    int64_t n_past_ = 0;
    std::unique_ptr<GdnState> gdn_;
};

}  // namespace strata
