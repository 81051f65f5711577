// The prompt cache's host-RAM level (engine/serve/prompt_store.h, --cache-ram): states
// saved by Runner::save_state and put back by load_state give the cold run's logits bit
// for bit, on one device and on a two-stage split; blocks are shared between entries;
// the budget holds with least-recently-used eviction; and through the scheduler, a
// conversation whose slot moved on to another one gets its history back from host
// memory, a hybrid model's mid-prompt checkpoints serve a prompt that leaves the history
// there, and a speculative request reuses a prefix with the same greedy tokens.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>

#include "engine/engine.h"
#include "engine/serve/prompt_store.h"
#include "engine/split/split_runner.h"
#include "server/options.h"
#include "tests/server_helpers.h"

using namespace strata;

namespace {

std::vector<int32_t> range_tokens(int32_t first, int n, int32_t mod = 200) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 1 + (first + 7 * i) % mod;
    return t;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Feeds tokens to seq (in windows of 5) and returns the last token's logits.
std::vector<float> feed(Runner& r, int seq, std::span<const int32_t> toks) {
    const auto V = static_cast<size_t>(r.model().hp().n_vocab);
    std::vector<float> logits(V);
    for (size_t i = 0; i < toks.size(); i += 5) {
        const size_t n = std::min<size_t>(5, toks.size() - i);
        Runner::Item it{seq, toks.subspan(i, n), false};
        r.eval(std::span<const Runner::Item>(&it, 1), logits.data());
    }
    return logits;
}

std::unique_ptr<Runner> runner(std::shared_ptr<const Model> m, bool split, int64_t n_ctx = 96) {
    if (!split) return make_local_runner(m, 2, n_ctx, GgmlType::F16);
    const int64_t L = m->hp().n_layer;
    const SplitPlan plan =
        plan_split("cpu:0,cpu:1", "auto", L, layer_weight_bytes(m->file(), L), head_weight_bytes(m->file()));
    return make_split_runner(m, plan, 1, n_ctx, GgmlType::F16, SplitConfig{});
}

}  // namespace

TEST_CASE("prompt store: a state put back gives the cold run's logits bit for bit", "[prompt_store]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next, synth::Arch::Qwen35}) {
        for (bool split : {false, true}) {
            INFO(synth::arch_name(arch) << (split ? " split" : " one device"));
            auto m = test::server_model(arch, /*mtp=*/arch == synth::Arch::Qwen3Next);
            const bool recurrent = m->hp().hybrid();
            auto r = runner(m, split);
            const int a = r->new_sequence(), b = r->new_sequence(), cold = r->new_sequence();
            PromptStore store(64u << 20, r->kv_bytes_per_pos(), r->recurrent_bytes(), /*block=*/4);
            CHECK((r->recurrent_bytes() > 0) == recurrent);

            const std::vector<int32_t> p = range_tokens(3, 10), next = {77, 78, 79};
            feed(*r, a, p);
            REQUIRE(store.save(*r, a, p));
            auto st = store.stats();
            CHECK(st.entries == 1);
            CHECK(st.blocks == 2);
            CHECK(st.bytes == 10 * r->kv_bytes_per_pos() + r->recurrent_bytes());

            // Put back into another sequence (which held something else), then go on.
            feed(*r, b, range_tokens(50, 12));
            const PromptStore::Match hit = store.match(cat(p, next), 12);
            REQUIRE(hit.n == 10);
            store.load(*r, b, hit);
            CHECK(r->n_past(b) == 10);
            const std::vector<float> warm = feed(*r, b, next);
            const std::vector<float> ref = feed(*r, cold, cat(p, next));
            CHECK(warm == ref);

            // A second entry sharing the first two blocks copies only its tail.
            const std::vector<int32_t> q = cat(std::vector<int32_t>(p.begin(), p.begin() + 8), {90, 91, 92});
            r->reset_sequence(a);
            feed(*r, a, q);
            REQUIRE(store.save(*r, a, q));
            st = store.stats();
            CHECK(st.entries == 2);
            CHECK(st.blocks == 2);
            CHECK(st.bytes == (8 + 2 + 3) * r->kv_bytes_per_pos() + 2 * r->recurrent_bytes());

            // A prompt that leaves both histories at position 6: an attention-only state
            // goes back there (part of a block); a recurrent one has no state there.
            const std::vector<int32_t> early = cat(std::vector<int32_t>(p.begin(), p.begin() + 6), {120, 121});
            const PromptStore::Match part = store.match(early, 7);
            CHECK(part.n == (recurrent ? 0 : 6));
            if (!recurrent) {
                r->reset_sequence(b);
                store.load(*r, b, part);
                r->reset_sequence(cold);
                CHECK(feed(*r, b, std::span<const int32_t>(early).subspan(6)) == feed(*r, cold, early));
            }
        }
    }
}

TEST_CASE("prompt store: least recently used entries make room; what cannot fit is not saved", "[prompt_store]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Next}) {
        INFO(synth::arch_name(arch));
        auto m = test::server_model(arch);
        auto r = runner(m, false);
        const int a = r->new_sequence();
        const size_t one = 8 * r->kv_bytes_per_pos() + r->recurrent_bytes();  // an 8-token entry
        PromptStore store(2 * one + one / 2, r->kv_bytes_per_pos(), r->recurrent_bytes(), /*block=*/4);
        std::vector<std::vector<int32_t>> convs;
        auto save = [&](int c) {
            convs.push_back(range_tokens(11 * c + 1, 8, 50 + c));
            r->reset_sequence(a);
            feed(*r, a, convs.back());
            REQUIRE(store.save(*r, a, convs.back()));
            CHECK(store.stats().bytes <= 2 * one + one / 2);
        };
        save(0);
        save(1);
        store.load(*r, a, store.match(cat(convs[0], {5}), 8));  // conversation 0 is used again
        save(2);
        // Conversation 1 was the least recently used when 2 needed room.
        const auto st = store.stats();
        CHECK(st.evictions == 1);
        CHECK(st.entries == 2);
        CHECK(store.match(cat(convs[0], {5}), 8).n == 8);
        CHECK(store.match(cat(convs[1], {5}), 8).n == 0);
        CHECK(store.match(cat(convs[2], {5}), 8).n == 8);
        // Larger than the whole budget: refused, and nothing evicted for it.
        PromptStore small(one - 1, r->kv_bytes_per_pos(), r->recurrent_bytes(), /*block=*/4);
        CHECK_FALSE(small.save(*r, a, convs.back()));
        CHECK(small.stats().entries == 0);
        CHECK(small.stats().bytes == 0);
        CHECK(small.stats().blocks == 0);
    }
}

namespace {

using Turn = test::EngineRun;

Turn ask(Engine& e, std::vector<int32_t> prompt, int64_t n) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.top_logprobs = 0;
    Turn out = test::run_request(e, std::move(r));
    REQUIRE(out.finish == FinishReason::Length);
    return out;
}

// pipelined: on a two-stage split with --pipeline-windows 2.
std::unique_ptr<Engine> engine(std::shared_ptr<const Model> m, size_t cache_ram, int64_t every = 0, int spec = 0,
                               std::function<void(std::span<const int32_t>, int64_t, int, Draft&)> edit = {},
                               bool pipelined = false) {
    EngineOptions o{.n_parallel = 1, .n_batch = 64, .spec_draft = spec, .cache_ram = cache_ram, .cache_every = every};
    o.spec_edit_draft = std::move(edit);
    o.spec_timed = false;  // the default's windows by acceptance alone
    test::ServerConfig c;
    c.n_ctx = 1024;
    c.split = pipelined;
    c.pipeline_windows = pipelined ? 2 : 0;
    return std::make_unique<Engine>(m, Tokenizer::from_gguf(m->file()), test::test_runner(m, c), o);
}

}  // namespace

TEST_CASE("prompt store: a conversation whose slot moved on gets its history back from host memory",
          "[prompt_store][server][engine]") {
    for (auto arch : {synth::Arch::Llama, synth::Arch::Qwen3Moe, synth::Arch::Qwen3Next, synth::Arch::Qwen35}) {
        INFO(synth::arch_name(arch));
        auto m = test::server_model(arch);
        auto warm = engine(m, 256u << 20), cold = engine(m, 0), off = engine(m, 0);
        // Long enough for whole blocks (PromptStore::kBlock) and a tail.
        const std::vector<int32_t> a1 = range_tokens(1, 300), b1 = range_tokens(2, 40, 150);
        const Turn ta = ask(*warm, a1, 5);
        CHECK(ask(*warm, b1, 5).cached == 0);  // the only slot moves on: A's state goes to host memory
        const std::vector<int32_t> a2 = cat(cat(a1, ta.ids), {300, 301});
        const Turn t2 = ask(*warm, a2, 6), t2_cold = ask(*cold, a2, 6);
        CHECK(t2.cached == static_cast<int64_t>(a1.size() + ta.ids.size() - 1));
        CHECK(t2.ids == t2_cold.ids);
        CHECK(t2.logprobs == t2_cold.logprobs);
        const EngineStats st = warm->stats();
        CHECK(st.cache_ram_hits == 1);
        CHECK(st.cache_ram_tokens == t2.cached);
        CHECK(st.cache_ram_saves >= 1);
        CHECK(st.cache_ram_bytes > 0);
        // Without the host level the slot had nothing to give.
        ask(*off, a1, 5);
        ask(*off, b1, 5);
        CHECK(ask(*off, a2, 6).cached == 0);
    }
}

TEST_CASE("prompt store: a hybrid model's checkpoints every N prompt tokens serve a prompt that leaves the history there",
          "[prompt_store][server][engine]") {
    auto m = test::server_model(synth::Arch::Qwen3Next);
    auto warm = engine(m, 256u << 20, /*every=*/64), cold = engine(m, 0);
    const std::vector<int32_t> x = range_tokens(4, 200);
    ask(*warm, x, 3);
    // Leaves x after 150 tokens: the checkpoint at 128 is the longest usable state.
    const std::vector<int32_t> y = cat(std::vector<int32_t>(x.begin(), x.begin() + 150), range_tokens(9, 20, 31));
    const Turn t = ask(*warm, y, 6), t_cold = ask(*cold, y, 6);
    CHECK(t.cached == 128);
    CHECK(t.ids == t_cold.ids);
    CHECK(t.logprobs == t_cold.logprobs);
    // Without checkpoints in between, only the end of x was kept: nothing to reuse.
    auto ends = engine(m, 256u << 20, /*every=*/0);
    ask(*ends, x, 3);
    CHECK(ask(*ends, y, 6).cached == 0);
}

TEST_CASE("prompt store: a speculative request reuses a cached prefix with the same greedy tokens",
          "[prompt_store][server][engine][spec]") {
    auto m = test::server_model(synth::Arch::Qwen3Next, /*mtp=*/true);
    // Random test models reject almost every draft: every other window's chain is cut to
    // one draft, so windows of 1 and of 3 drafts both roll back.
    auto edit = [](std::span<const int32_t>, int64_t pos, int k, Draft& d) {
        if (pos % 2 == 0 && k > 0 && !d.tokens.empty()) d.tokens.erase(d.tokens.begin() + 1, d.tokens.end());
    };
    auto spec = engine(m, 256u << 20, 0, /*spec=*/3, edit), plain = engine(m, 0);
    const std::vector<int32_t> p1 = range_tokens(6, 40);
    const Turn a = ask(*spec, p1, 8);
    CHECK(a.ids == ask(*plain, p1, 8).ids);
    // The next turn goes on from everything the slot holds (its own sequence).
    const std::vector<int32_t> p2 = cat(cat(p1, a.ids), {310, 311});
    const Turn b = ask(*spec, p2, 8);
    CHECK(b.cached == static_cast<int64_t>(p1.size() + a.ids.size() - 1));
    CHECK(b.ids == ask(*plain, p2, 8).ids);
    // Another conversation, then back to this one: from host memory.
    ask(*spec, range_tokens(8, 30, 77), 4);
    const std::vector<int32_t> p3 = cat(cat(p2, b.ids), {320});
    const Turn c = ask(*spec, p3, 8);
    CHECK(c.cached == static_cast<int64_t>(p2.size() + b.ids.size() - 1));
    CHECK(c.ids == ask(*plain, p3, 8).ids);
    CHECK(spec->stats().spec_windows > 0);
}

namespace {

// Every draft chain a speculative engine makes (before any edit), for one request.
struct DraftLog {
    struct Chain {
        int64_t pos;
        std::vector<int32_t> tokens;
        std::vector<float> probs;
        bool operator==(const Chain&) const = default;
    };
    std::vector<Chain> chains;
};

// Greedy continuations of the prompts a test asks, for an oracle drafter.
using Continuations = std::map<std::vector<int32_t>, std::vector<int32_t>>;

// A speculative engine that logs every chain, then verifies the oracle's drafts (the
// greedy continuation) in most windows, so windows keep all their drafts, and the MTP's
// own (rejected almost always by a random model) in the others, so they roll back.
std::unique_ptr<Engine> logging_engine(std::shared_ptr<const Model> m, size_t cache_ram, int64_t every,
                                       std::shared_ptr<DraftLog> log, std::shared_ptr<const Continuations> oracle,
                                       bool pipelined = false) {
    return engine(m, cache_ram, every, /*spec=*/3,
                  [log, oracle](std::span<const int32_t> prompt, int64_t pos, int k, Draft& d) {
                      log->chains.push_back({pos, d.tokens, d.probs});
                      const auto it = oracle->find(std::vector<int32_t>(prompt.begin(), prompt.end()));
                      if (pos % 3 == 0 || it == oracle->end()) return;
                      const std::vector<int32_t>& full = it->second;  // prompt, then its continuation
                      d.tokens.clear();
                      for (int64_t p = pos + 1; p <= pos + k && p < static_cast<int64_t>(full.size()); ++p)
                          d.tokens.push_back(full[static_cast<size_t>(p)]);
                      d.probs.assign(d.tokens.size(), 1.0f);
                  },
                  pipelined);
}

// The drafts of a request on an engine that starts cold.
std::vector<DraftLog::Chain> cold_drafts(std::shared_ptr<const Model> m, std::shared_ptr<const Continuations> oracle,
                                         const std::vector<int32_t>& prompt, int64_t n, bool pipelined = false) {
    auto log = std::make_shared<DraftLog>();
    auto e = logging_engine(m, 0, 0, log, oracle, pipelined);
    ask(*e, prompt, n);
    return log->chains;
}

}  // namespace

TEST_CASE("prompt store: after a cache hit the MTP drafts exactly as from a cold start",
          "[prompt_store][server][engine][spec]") {
    // The MTP's KV below the reused prefix is whole, and the pair at its last position is
    // made from the row kept with the state: from the slot, from host memory, and from a
    // checkpoint in the middle of a prompt.
    auto m = test::server_model(synth::Arch::Qwen3Next, /*mtp=*/true);
    auto plain = engine(m, 0);
    auto oracle = std::make_shared<Continuations>();
    const auto greedy = [&](const std::vector<int32_t>& prompt, int64_t n) {
        const Turn t = ask(*plain, prompt, n);
        (*oracle)[prompt] = cat(prompt, t.ids);
        return t.ids;
    };
    auto log = std::make_shared<DraftLog>();
    auto warm = logging_engine(m, 256u << 20, /*every=*/64, log, oracle);
    const std::vector<int32_t> p1 = range_tokens(6, 40);
    const std::vector<int32_t> a = greedy(p1, 8);
    CHECK(ask(*warm, p1, 8).ids == a);
    SECTION("the slot's own sequence") {
        const std::vector<int32_t> p2 = cat(cat(p1, a), {310, 311});
        const std::vector<int32_t> b = greedy(p2, 8);
        log->chains.clear();
        const Turn t2 = ask(*warm, p2, 8);
        CHECK(t2.ids == b);
        CHECK(t2.cached == static_cast<int64_t>(p1.size() + a.size() - 1));
        REQUIRE(log->chains.size() >= 2);
        CHECK(log->chains == cold_drafts(m, oracle, p2, 8));
        // The same conversation back from host memory after another one.
        const std::vector<int32_t> other = range_tokens(8, 30, 77);
        greedy(other, 4);
        ask(*warm, other, 4);
        const std::vector<int32_t> p3 = cat(cat(p2, b), {320});
        greedy(p3, 8);
        log->chains.clear();
        const Turn t3 = ask(*warm, p3, 8);
        CHECK(t3.cached == static_cast<int64_t>(p2.size() + b.size() - 1));
        CHECK(warm->stats().cache_ram_hits == 1);
        CHECK(log->chains == cold_drafts(m, oracle, p3, 8));
    }
    SECTION("a checkpoint in the middle of a prompt") {
        const std::vector<int32_t> x = range_tokens(4, 200);
        greedy(x, 3);
        ask(*warm, x, 3);
        const std::vector<int32_t> y = cat(std::vector<int32_t>(x.begin(), x.begin() + 150), range_tokens(9, 20, 31));
        greedy(y, 8);
        log->chains.clear();
        CHECK(ask(*warm, y, 8).cached == 128);
        CHECK(log->chains == cold_drafts(m, oracle, y, 8));
    }
    SECTION("pipelined windows on a split") {
        auto piped = logging_engine(m, 256u << 20, 64, log, oracle, /*pipelined=*/true);
        CHECK(ask(*piped, p1, 8).ids == a);
        const std::vector<int32_t> p2 = cat(cat(p1, a), {310, 311});
        greedy(p2, 8);
        log->chains.clear();
        CHECK(ask(*piped, p2, 8).cached == static_cast<int64_t>(p1.size() + a.size() - 1));
        REQUIRE(log->chains.size() >= 2);
        CHECK(log->chains == cold_drafts(m, oracle, p2, 8, true));
        CHECK(piped->stats().pipeline_kept > 0);
    }
    CHECK(warm->stats().spec_accepted > 0);
}

TEST_CASE("prompt store: the server's flags", "[prompt_store][server]") {
    auto opts = [](std::vector<const char*> args) {
        Flags f = server::server_flags();
        args.insert(args.begin(), {"strata-server", "--demo"});
        f.parse(static_cast<int>(args.size()), const_cast<char**>(args.data()));
        return server::server_options(f);
    };
    const auto dflt = opts({});
    CHECK(dflt.engine.cache_ram == size_t{8192} << 20);
    CHECK(dflt.engine.cache_every == 2048);
    CHECK(dflt.runner.draft_vocab == -1);  // --spec-draft-vocab auto
    const auto set = opts({"--cache-ram", "16", "--cache-every", "0", "--spec-draft-vocab", "4096"});
    CHECK(set.engine.cache_ram == size_t{16} << 20);
    CHECK(set.engine.cache_every == 0);
    CHECK(set.runner.draft_vocab == 4096);
    CHECK(opts({"--cache-ram", "0"}).engine.cache_ram == 0);
    CHECK_THROWS(opts({"--cache-ram", "-1"}));
    CHECK_THROWS(opts({"--spec-draft-vocab", "most"}));
}
