// Several sequences in one window (continuous batching): each sequence's logits are
// bit-identical to running it alone, for every architecture.
#include <catch2/catch.hpp>

#include "engine/backend/cpu_ops.h"
#include "engine/model/model.h"
#include "tests/model_helpers.h"

using namespace strata;

TEST_CASE("eval_batch: sequences sharing a window match running alone", "[model][batch][determinism]") {
    const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8}, {100, 200, 300, 7}};
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35,
                      synth::Arch::Qwen35Moe}) {
        auto m = Model::load(test::to_file(test::tiny_model(arch, GgmlType::Q8_0, 21)));
        const int64_t V = m->hp().n_vocab;
        ThreadPool pool(2);
        CpuOps cpu_ops(pool);
        ForwardCtx ctx(cpu_ops, *m);

        // Alone: prompt, then two decode steps with fixed tokens.
        std::vector<std::vector<float>> alone;
        for (const auto& p : prompts) {
            SeqState s = m->new_state(ctx.ops, 32, GgmlType::F16);
            std::vector<float> l(static_cast<size_t>(V));
            m->eval(ctx, s, p, l.data(), false);
            alone.push_back(l);
            for (int32_t t : {11, 12}) {
                const int32_t one[1] = {t};
                m->eval(ctx, s, one, l.data(), false);
                alone.push_back(l);
            }
        }

        // Together: all prompts in one window, then each decode step batched.
        std::vector<SeqState> states;
        for (size_t i = 0; i < prompts.size(); ++i) states.push_back(m->new_state(ctx.ops, 32, GgmlType::F16));
        std::vector<Model::BatchItem> items;
        for (size_t i = 0; i < prompts.size(); ++i) items.push_back({&states[i], prompts[i], false});
        std::vector<float> rows(prompts.size() * static_cast<size_t>(V));
        m->eval_batch(ctx, items, rows.data());
        std::vector<std::vector<float>> together(alone.size());
        for (size_t i = 0; i < prompts.size(); ++i)
            together[i * 3].assign(rows.begin() + static_cast<long>(i * V), rows.begin() + static_cast<long>((i + 1) * V));
        for (int step = 0; step < 2; ++step) {
            const int32_t tok[1] = {11 + step};
            items.clear();
            for (size_t i = 0; i < prompts.size(); ++i) items.push_back({&states[i], std::span<const int32_t>(tok, 1), false});
            m->eval_batch(ctx, items, rows.data());
            for (size_t i = 0; i < prompts.size(); ++i)
                together[i * 3 + 1 + step].assign(rows.begin() + static_cast<long>(i * V),
                                                  rows.begin() + static_cast<long>((i + 1) * V));
        }
        INFO(synth::arch_name(arch));
        for (size_t i = 0; i < alone.size(); ++i) CHECK(together[i] == alone[i]);
    }
}
