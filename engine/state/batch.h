// A window of rows from one or more sequences, processed together. Row-wise work
// (norms, matrix products, MoE) runs over all rows at once; work that reads or
// advances a sequence's state (attention over its KV cache, the GDN recurrence)
// runs per sequence over that sequence's rows. Because every kernel is
// batch-invariant, a token's result is the same whatever shares its window.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/state/seq_state.h"

namespace strata {

struct BatchSeq {
    SeqState* state = nullptr;
    int64_t pos0 = 0;  // position of this sequence's first row
    int64_t row0 = 0;  // first row in the window
    int64_t n = 0;     // rows
};

struct Batch {
    std::vector<BatchSeq> seqs;  // in row order, contiguous
    int64_t n_rows = 0;

    // Appends n rows of `state` at positions pos0..pos0+n-1.
    void add(SeqState& state, int64_t pos0, int64_t n) {
        seqs.push_back({&state, pos0, n_rows, n});
        n_rows += n;
    }
    static Batch single(SeqState& state, int64_t pos0, int64_t n) {
        Batch b;
        b.add(state, pos0, n);
        return b;
    }
};

}  // namespace strata
