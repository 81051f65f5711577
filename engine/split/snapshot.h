// A copy of the part of a sequence's state that a verify window cannot simply forget:
// its length and its Gated DeltaNet state (conv history + delta-rule state). KV
// entries past n_past are overwritten by the next window, so they are not copied
// (MODEL_SPEC 4.10, option (b): keep the state from before the window, replay the
// accepted tokens). The copy is memory of the stage's device and save / load are copies
// on that device: call them from an op queued on it (Device::submit).
//
// Lending (save(..., lend), where the device's delta rule reads its state from another
// buffer at no cost: Ops::state_reads_elsewhere): the delta-rule states are not copied.
// The conv histories are (a few rows per layer); then the sequence and the snapshot
// exchange buffers, so the snapshot holds the state as it was, and the sequence reads
// each layer's delta-rule state from the snapshot's buffer until its next write
// (GdnState::read_from): the window's recurrence reads each row from there as it takes
// it up, a read it does anyway. For a 48-layer Qwen3-Next that is ~72 MiB not copied per
// window, and as much again per rollback (load).
#pragma once
#include <cstddef>
#include <memory>

#include "engine/backend/ops.h"
#include "engine/core/error.h"
#include "engine/model/gdn.h"
#include "engine/state/seq_state.h"

namespace strata {

class StateSnapshot {
public:
    // The first save allocates (one GdnState's worth); later saves copy into it, or lend
    // (above) when `lend` and the device reads states elsewhere at no cost.
    void save(Ops& ops, SeqState& s, bool lend = false) {
        n_past_ = s.n_past;
        if (s.gdn) {
            if (!gdn_) gdn_ = std::make_unique<GdnState>(s.gdn->like(ops.allocator()));
            settle(ops, *s.gdn);  // layers still read from a snapshot's buffer (this one's): copied home first
            if (lend && ops.state_reads_elsewhere()) {
                if (const int64_t cr = s.gdn->all_conv_rows(); cr > 0)
                    ops.copy(Tensor::f32(gdn_->conv(0), s.gdn->conv_dim(), cr),
                             Tensor::f32(s.gdn->conv(0), s.gdn->conv_dim(), cr));
                s.gdn->swap_buffer(*gdn_);
                s.gdn->read_from(*gdn_);
            } else {
                copy(ops, *gdn_, *s.gdn);
            }
        }
        valid_ = true;
    }
    // Where the device reads states elsewhere at no cost, the delta-rule states are not
    // copied back either: the sequence reads each layer's from the snapshot's buffer until
    // its next write (a rollback's replay writes every layer at once, reading them from
    // here), and whatever writes this buffer (save) settles the sequence first.
    void load(Ops& ops, SeqState& s) const {
        STRATA_CHECK(valid_, "restore without a snapshot");
        s.n_past = n_past_;
        if (s.gdn) {
            if (ops.state_reads_elsewhere()) {
                if (const int64_t cr = s.gdn->all_conv_rows(); cr > 0)
                    ops.copy(Tensor::f32(s.gdn->conv(0), s.gdn->conv_dim(), cr),
                             Tensor::f32(gdn_->conv(0), s.gdn->conv_dim(), cr));
                s.gdn->read_from(*gdn_);  // whatever it read from before is forgotten with its state
            } else {
                copy(ops, *s.gdn, *gdn_);
                s.gdn->read_here();  // every layer's state is now in its own buffer
            }
        }
    }
    // The buffer, without a copy: what a sequence's pipelined windows take up front.
    void reserve(Ops& ops, const SeqState& s) {
        if (s.gdn && !gdn_) gdn_ = std::make_unique<GdnState>(s.gdn->like(ops.allocator()));
    }
    bool valid() const { return valid_; }
    int64_t n_past() const { return n_past_; }
    void invalidate() { valid_ = false; }  // the sequence was reset: keep the buffer, not the data
    size_t bytes() const { return gdn_ ? gdn_->bytes() : 0; }

    // The layers a state still reads from a snapshot's buffer (GdnState::read_from),
    // copied into its own, so that its buffer holds all of it: before anything reads or
    // copies the buffer whole.
    static void settle(Ops& ops, GdnState& g) {
        if (!g.reads_elsewhere()) return;
        for (int64_t l = 0; l < g.n_layers(); ++l) gdn_state_home(ops, g, l);
        g.read_here();
    }

private:
    static void copy(Ops& ops, const GdnState& dst, const GdnState& src) {
        const int64_t cr = src.all_conv_rows(), sr = src.all_ssm_rows();
        if (cr > 0) ops.copy(Tensor::f32(dst.conv(0), src.conv_dim(), cr), Tensor::f32(src.conv(0), src.conv_dim(), cr));
        if (sr > 0) ops.copy(Tensor::f32(dst.ssm(0), src.ssm_row(), sr), Tensor::f32(src.ssm(0), src.ssm_row(), sr));
    }

    bool valid_ = false;
    int64_t n_past_ = 0;
    std::unique_ptr<GdnState> gdn_;
};

// s as a new sequence's state, in its own memory: length 0, the Gated DeltaNet state zeroed
// (read from its own buffer again), the log disarmed. The KV cache keeps its bytes: no
// position at or past n_past is read before a window writes it. A queued op on s's device.
inline void clear_state(Ops& ops, SeqState& s) {
    s.n_past = 0;
    if (s.gdn) {
        s.gdn->read_here();
        if (const int64_t cr = s.gdn->all_conv_rows(); cr > 0) ops.zero(Tensor::f32(s.gdn->conv(0), s.gdn->conv_dim(), cr));
        if (const int64_t sr = s.gdn->all_ssm_rows(); sr > 0) ops.zero(Tensor::f32(s.gdn->ssm(0), s.gdn->ssm_row(), sr));
    }
    if (s.gdn_log) s.gdn_log->disarm();
}

// After a snapshot for a verify window of `rows` rows (0: not one), the window's Gated
// DeltaNet inputs go into the state's log (allocated at the first such window), so the
// window can roll back without a replay (Runner::rollback). Call it where save is called;
// owner tells the windows of different snapshot slots apart (GdnLog::arm).
inline void arm_log(Ops& ops, SeqState& s, int64_t rows, int owner = 0) {
    if (!s.gdn) return;
    if (rows <= 0 || rows > GdnLog::kRows) {
        if (s.gdn_log) s.gdn_log->disarm();
        return;
    }
    if (!s.gdn_log) s.gdn_log = std::make_unique<GdnLog>(ops.allocator(), s.gdn->n_layers(), s.gdn->conv_dim(), s.gdn->nv());
    s.gdn_log->arm(owner);
}

}  // namespace strata
