// One stage's part of a window: the body every schedule of the chain runs (serial and
// overlap windows in split_runner.cpp, pipelined ones in stage_pipe.cpp).
#include "engine/split/split_runner_impl.h"

namespace strata::split_detail {

StepEnd run_stage_step(const Model& model, Stage& st, const StageStep& step) {
    const Batch& batch = *step.batch;
    const int64_t E = model.hp().n_embd, rows = batch.n_rows;
    ForwardCtx& ctx = *st.ctx;
    float* x = step.x;
    if (!step.tokens.empty()) {
        for (size_t i = 0; i < batch.seqs.size(); ++i)
            model.embed(ctx, step.tokens[i].data(), batch.seqs[i].n, x + batch.seqs[i].row0 * E);
    } else if (step.in) {
        const std::optional<Tensor> in = ctx.ops.handoff_wait(*step.in, step.window, step.wait_ms, Tensor::f32(x, E, rows));
        if (!in) return StepEnd::HandInFailed;  // x untouched, the payload unused
        if (step.keep_in) ctx.ops.copy(Tensor::f32(step.keep_in, E, rows), *in);
        // On a device that computes on the payload in place, the stage runs there: the
        // writer publishes into it again only after this window (the host orders it).
        x = in->f();
    }
    if (step.cancel) {
        for (int64_t l = st.l0; l < st.l1; ++l) {
            if (step.cancel->load(std::memory_order_acquire)) return StepEnd::Cancelled;
            model.run_layers(ctx, batch, l, l + 1, x);
        }
    } else {
        model.run_layers(ctx, batch, st.l0, st.l1, x);
    }
    if (step.out) ctx.ops.handoff_publish(Tensor::f32(x, E, rows), *step.out, step.window, step.drop);
    if (step.head) model.output(ctx, batch, x, step.want, step.logits);
    // A wait on the device is known to have failed only now; what the stage computed is
    // not used, and its publish raised the abort value for the next stage.
    if (step.in && ctx.ops.hand_in_failed(*step.in)) return StepEnd::HandInFailed;
    return StepEnd::Done;
}

void roll_back_stage(const Model& model, Stage& st, SeqState& state, const StateSnapshot& snap, int64_t n) {
    snap.load(st.dev->ops(), state);
    model.replay_log(*st.ctx, state, n);
    state.n_past += n;
    if (state.gdn_log) state.gdn_log->disarm();  // its window is settled
}

}  // namespace strata::split_detail
