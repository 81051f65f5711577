// The single-device Runner: one thread pool, one SeqState per sequence.
#include <map>
#include <vector>

#include "engine/backend/cpu_ops.h"
#include "engine/core/error.h"
#include "engine/run/runner.h"
#include "engine/state/snapshot.h"

namespace strata {
namespace {

class LocalRunner final : public Runner {
public:
    LocalRunner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx, GgmlType cache_type)
        : model_(std::move(model)), pool_(threads), ops_(pool_), ctx_(ops_, *model_), n_ctx_(n_ctx), cache_type_(cache_type) {
        STRATA_CHECK(n_ctx > 0, "context length must be positive, got {}", n_ctx);
    }

    const Model& model() const override { return *model_; }
    int64_t n_ctx() const override { return n_ctx_; }

    int new_sequence() override {
        int id = 0;
        while (seqs_.count(id)) ++id;
        seqs_.emplace(id, model_->new_state(n_ctx_, cache_type_));
        return id;
    }
    void free_sequence(int seq) override {
        seqs_.erase(seq);
        snaps_.erase(seq);
    }
    void reset_sequence(int seq) override {
        state(seq) = model_->new_state(n_ctx_, cache_type_);
        if (auto it = snaps_.find(seq); it != snaps_.end()) it->second.invalidate();
    }
    int64_t n_past(int seq) const override { return const_cast<LocalRunner*>(this)->state(seq).n_past; }

    void eval(std::span<const Item> items, float* logits_rows) override {
        std::vector<Model::BatchItem> b;
        b.reserve(items.size());
        for (const Item& it : items) b.push_back({&state(it.seq), it.tokens, it.all_logits, it.hidden_out});
        model_->eval_batch(ctx_, b, logits_rows);
    }

    bool has_mtp() const override { return model_->has_mtp(); }
    void mtp(int seq, const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits_rows,
             float* hidden_out) override {
        model_->mtp_forward(ctx_, state(seq), hidden, tokens, T, pos0, logits_rows, hidden_out,
                            /*last_logits_only=*/true);
    }
    void snapshot(int seq) override {
        const SeqState& s = state(seq);  // checks seq before a slot is made for it
        snaps_[seq].save(s);
    }
    void restore(int seq) override {
        auto it = snaps_.find(seq);
        STRATA_CHECK(it != snaps_.end(), "sequence {} has no snapshot", seq);
        it->second.load(state(seq));
    }
    size_t snapshot_bytes() const override {
        size_t n = 0;
        for (const auto& [id, s] : snaps_) n += s.bytes();
        return n;
    }

    std::string describe() const override {
        return fmt::format("cpu:0 ({} threads) layers 0-{}", pool_.size(), model_->hp().n_layer - 1);
    }

private:
    SeqState& state(int seq) {
        auto it = seqs_.find(seq);
        STRATA_CHECK(it != seqs_.end(), "no sequence {}", seq);
        return it->second;
    }

    std::shared_ptr<const Model> model_;
    ThreadPool pool_;
    CpuOps ops_;
    ForwardCtx ctx_;
    int64_t n_ctx_;
    GgmlType cache_type_;
    std::map<int, SeqState> seqs_;
    std::map<int, StateSnapshot> snaps_;  // per sequence, from its first snapshot()
};

}  // namespace

std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type) {
    return std::make_unique<LocalRunner>(std::move(model), threads, n_ctx, cache_type);
}

}  // namespace strata
