#include "engine/engine.h"

#include <chrono>

#include "engine/generate.h"
#include "engine/serve/scheduler.h"

namespace strata {

Engine::Engine(std::shared_ptr<const Model> model, Tokenizer tok, std::unique_ptr<Runner> runner, EngineOptions opt)
    : model_(std::move(model)), tok_(std::move(tok)), opt_(opt), runner_(std::move(runner)) {
    sched_ = std::make_unique<Scheduler>(*runner_, tok_, opt_);
}

Engine::~Engine() { sched_.reset(); }  // joins the scheduler before the runner goes

std::unique_ptr<Engine> Engine::load(const RunnerOptions& ro, const EngineOptions& eo,
                                     const std::function<void(const std::string&)>& progress) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    progress(fmt::format("mapping {} and binding its tensors", ro.model_path));
    std::shared_ptr<const Model> model = Model::load(ro.model_path, ro.mtp_path);
    const HParams& hp = model->hp();
    progress(fmt::format("model: {} layers, {} embd, vocab {}", hp.n_layer, hp.n_embd, hp.n_vocab));
    progress("reading the tokenizer");
    Tokenizer tok = Tokenizer::from_gguf(model->file());
    progress(fmt::format("reserving {} slot(s) of context {}", eo.n_parallel,
                         effective_context(hp, ro.n_ctx, ro.cache_type)));
    auto runner = make_runner(model, ro);
    const std::string where = runner->describe();
    auto e = std::make_unique<Engine>(std::move(model), std::move(tok), std::move(runner), eo);
    progress(fmt::format("ready: {} in {:.2f} s", where,
                         std::chrono::duration<double>(clock::now() - t0).count()));
    return e;
}

std::shared_ptr<RequestStream> Engine::submit(Request r) {
    using K = EngineError::Kind;
    const int64_t n = static_cast<int64_t>(r.prompt.size());
    if (n == 0) throw EngineError(K::Invalid, "the prompt is empty", "prompt");
    if (n >= n_ctx())
        throw EngineError(K::Invalid,
                          fmt::format("the prompt has {} tokens but the context holds {}; shorten it", n, n_ctx()),
                          "prompt");
    for (int32_t t : r.prompt)
        if (t < 0 || t >= tok_.n_vocab())
            throw EngineError(K::Invalid, fmt::format("token id {} is outside the vocabulary (0..{})", t,
                                                      tok_.n_vocab() - 1), "prompt");
    if (r.max_tokens == 0 || r.max_tokens < -1)
        throw EngineError(K::Invalid, fmt::format("max_tokens must be >= 1, got {}", r.max_tokens), "max_tokens");
    if (r.top_logprobs > 20)
        throw EngineError(K::Invalid, fmt::format("top_logprobs must be in 0..20, got {}", r.top_logprobs),
                          "top_logprobs");
    if (r.spec_draft < -1)
        throw EngineError(K::Invalid, fmt::format("spec_draft must be >= 0, got {}", r.spec_draft), "spec_draft");
    try {
        r.sampling.validate();
    } catch (const Error& ex) {
        throw EngineError(K::Invalid, ex.what());
    }
    return sched_->submit(std::move(r));
}

void Engine::shutdown(bool cancel_active) { sched_->shutdown(cancel_active); }

int64_t Engine::n_ctx() const { return runner_->n_ctx(); }

EngineStats Engine::stats() const { return sched_->stats(); }

}  // namespace strata
