// The single-device Runner: one thread pool, one SeqState per sequence.
#include <map>
#include <vector>

#include "engine/core/error.h"
#include "engine/run/runner.h"

namespace strata {
namespace {

class LocalRunner final : public Runner {
public:
    LocalRunner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx, GgmlType cache_type)
        : model_(std::move(model)), pool_(threads), ctx_{pool_, {}}, n_ctx_(n_ctx), cache_type_(cache_type) {
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
    void free_sequence(int seq) override { seqs_.erase(seq); }
    void reset_sequence(int seq) override { state(seq) = model_->new_state(n_ctx_, cache_type_); }
    int64_t n_past(int seq) const override { return const_cast<LocalRunner*>(this)->state(seq).n_past; }

    void eval(std::span<const Item> items, float* logits_rows) override {
        std::vector<Model::BatchItem> b;
        b.reserve(items.size());
        for (const Item& it : items) b.push_back({&state(it.seq), it.tokens, it.all_logits});
        model_->eval_batch(ctx_, b, logits_rows);
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
    ForwardCtx ctx_;
    int64_t n_ctx_;
    GgmlType cache_type_;
    std::map<int, SeqState> seqs_;
};

}  // namespace

std::unique_ptr<Runner> make_local_runner(std::shared_ptr<const Model> model, int threads, int64_t n_ctx,
                                          GgmlType cache_type) {
    return std::make_unique<LocalRunner>(std::move(model), threads, n_ctx, cache_type);
}

}  // namespace strata
