// strata eval: run tokens through the model and print the top-K logits of the last
// position (or of every position), for comparing engines; --logits-out dumps them.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <memory>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/text/tokenizer.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace strata {

Flags eval_flags() {
    return Flags("eval", "strata eval -m MODEL (--tokens 1,2,3 | -p TEXT) [--top K] [--all] [--json] [--logits-out FILE]",
                 concat(runner_flags(),
                             {
                                 {"--tokens", "IDS", "", "comma-separated token ids"},
                                 {"--prompt", "TEXT", "", "text to tokenize (no special tokens, BOS as the model wants)", "-p"},
                                 {"--top", "K", "10", "how many of the largest logits to print"},
                                 {"--all", "", "", "print every position, not only the last"},
                                 {"--json", "", "", "print JSON"},
                                 {"--logits-out", "FILE", "", "write the last position's full logits as raw little-endian f32"},
                             }));
}

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        int32_t v = 0;
        auto [p, ec] = std::from_chars(s.data() + i, s.data() + j, v);
        if (ec != std::errc() || p != s.data() + j) throw UsageError(fmt::format("eval: '{}' is not a list of token ids", s));
        ids.push_back(v);
        i = j + 1;
    }
    return ids;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
    Flags f = eval_flags();
    if (!cli::parse(f, argc, argv)) return 0;
    if (!f.given("--model")) throw UsageError("eval: -m MODEL is required");
    if (f.given("--tokens") == f.given("--prompt")) throw UsageError("eval: give exactly one of --tokens and -p");
    const int64_t top = f.integer("--top");
    if (top < 1) throw UsageError("eval: --top must be >= 1");
    RunnerOptions ro = runner_options(f);
    std::shared_ptr<const Model> model = Model::load(ro.model_path, ro.mtp_path);
    const HParams& hp = model->hp();
    std::vector<int32_t> toks;
    if (f.given("--tokens")) {
        toks = parse_ids(f.str("--tokens"));
    } else {
        const Tokenizer tok = Tokenizer::from_gguf(model->file());
        toks = tok.encode(f.str("--prompt"), false);
        if (tok.add_bos()) toks.insert(toks.begin(), tok.bos());
    }
    if (toks.empty()) fail("eval: no tokens");
    for (int32_t id : toks)
        if (id < 0 || id >= hp.n_vocab) fail("eval: token id {} is out of range (vocabulary has {})", id, hp.n_vocab);
    if (ro.n_ctx == 0) ro.n_ctx = static_cast<int64_t>(toks.size());
    auto runner = make_runner(model, ro);
    const int seq = runner->new_sequence();
    const int64_t T = static_cast<int64_t>(toks.size()), V = hp.n_vocab;
    std::vector<float> logits(static_cast<size_t>(T * V));
    for (int64_t i = 0; i < T; i += ro.n_batch) {
        const int64_t n = std::min(ro.n_batch, T - i);
        const Runner::Item item{seq, std::span<const int32_t>(toks.data() + i, static_cast<size_t>(n)), true};
        runner->eval(std::span<const Runner::Item>(&item, 1), logits.data() + i * V);
    }

    const int64_t first = f.on("--all") ? 0 : T - 1;
    const int64_t k = std::min(top, V);
    nlohmann::json out = nlohmann::json::array();
    for (int64_t t = first; t < T; ++t) {
        const float* l = logits.data() + t * V;
        std::vector<int32_t> idx(static_cast<size_t>(V));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        if (f.on("--json")) {
            nlohmann::json top_list = nlohmann::json::array();
            for (int64_t i = 0; i < k; ++i) top_list.push_back({{"id", idx[i]}, {"logit", l[idx[i]]}});
            out.push_back({{"pos", t}, {"token", toks[static_cast<size_t>(t)]}, {"top", top_list}});
        } else {
            fmt::print("pos {} (token {}):", t, toks[static_cast<size_t>(t)]);
            for (int64_t i = 0; i < k; ++i) fmt::print(" {}:{:.5f}", idx[i], l[idx[i]]);
            fmt::print("\n");
        }
    }
    if (f.on("--json")) fmt::print("{}\n", out.dump(1));
    if (f.given("--logits-out")) {
        std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(f.str("--logits-out").c_str(), "wb"), &std::fclose);
        if (!fp) fail("{}: cannot open for writing", f.str("--logits-out"));
        if (std::fwrite(logits.data() + (T - 1) * V, sizeof(float), static_cast<size_t>(V), fp.get()) != static_cast<size_t>(V))
            fail("{}: write failed", f.str("--logits-out"));
    }
    return 0;
}

}  // namespace strata
