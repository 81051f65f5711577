// Speculative decoding with the MTP head (engine/speculative, docs/spec.md): the acceptance
// rule keeps the target distribution, rollback is bit-exact, and greedy output is the
// same with speculation off and on, on one device and on a two-stage split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/backend/cpu_ops.h"
#include "engine/generate.h"
#include "engine/speculative/accept.h"
#include "engine/speculative/mtp_drafter.h"
#include "engine/speculative/speculative.h"
#include "engine/split/snapshot.h"
#include "engine/split/split_runner.h"
#include "tests/model_helpers.h"

using namespace strata;

namespace {

std::shared_ptr<const Model> mtp_model(uint64_t seed = 7, synth::Arch arch = synth::Arch::Qwen3Next) {
    return Model::load(test::to_file(test::tiny_model(arch, GgmlType::Q8_0, seed, synth::GdnLayout::Split, /*mtp=*/true)));
}

std::unique_ptr<Runner> split2(std::shared_ptr<const Model> m, bool overlap) {
    SplitConfig cfg;
    cfg.overlap = overlap;
    cfg.wait_ms = 10000;
    const int64_t n = m->hp().n_layer;
    const SplitPlan plan =
        plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file()));
    return make_split_runner(std::move(m), plan, 1, 128, GgmlType::F16, cfg);
}

// The runners the rollback tests compare: one device (mode 0), two stages serial (1) and
// with overlap (2).
std::unique_ptr<Runner> runner_of(std::shared_ptr<const Model> m, int mode) {
    return mode == 0 ? make_local_runner(std::move(m), 2, 128, GgmlType::F16) : split2(std::move(m), mode == 2);
}

// One sequence's tokens through the runner (all: logits of every row, else the last).
void eval_one(Runner& r, int seq, std::span<const int32_t> toks, bool all, float* out) {
    const Runner::Item it{seq, toks, all};
    r.eval(std::span<const Runner::Item>(&it, 1), out);
}

// Pearson chi-square of observed counts against probabilities p (cells with p > 0).
double chi_square(const std::vector<int64_t>& count, const std::vector<double>& p, int64_t n) {
    double chi = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0) {
            REQUIRE(count[i] == 0);  // a token the target never emits was emitted
            continue;
        }
        const double e = p[i] * static_cast<double>(n);
        chi += (static_cast<double>(count[i]) - e) * (static_cast<double>(count[i]) - e) / e;
    }
    return chi;
}

std::vector<int32_t> gen(Runner& r, const Tokenizer& tok, const std::vector<int32_t>& prompt, int spec, int64_t n,
                         GenerateStats* st = nullptr, SamplingParams sp = {}) {
    GenerateOptions opt;
    opt.n_predict = n;
    opt.n_batch = 4;  // several prompt windows: their hidden rows must line up
    opt.spec_draft = spec;
    opt.sampling = sp;
    std::vector<int32_t> out;
    const GenerateStats s = generate(r, tok, prompt, opt, [](std::string_view) { return true; }, &out);
    if (st) *st = s;
    return out;
}

void check_stats_add_up(const GenerateStats& st) {
    const SpecStats& s = st.spec;
    CHECK(std::accumulate(s.drafted_at.begin(), s.drafted_at.end(), int64_t{0}) == s.drafted);
    CHECK(std::accumulate(s.accepted_at.begin(), s.accepted_at.end(), int64_t{0}) == s.accepted);
    for (size_t i = 0; i < s.drafted_at.size(); ++i) {
        CHECK(s.accepted_at[i] <= s.drafted_at[i]);
        if (i > 0) CHECK(s.accepted_at[i] <= s.accepted_at[i - 1]);  // a chain keeps a prefix
    }
    // One token from the prompt, then per window the kept drafts plus one (fewer when an
    // end of generation inside a window drops the window's tokens after it).
    if (st.stopped_by_eog) CHECK(st.n_generated <= 1 + s.windows + s.accepted);
    else CHECK(st.n_generated == 1 + s.windows + s.accepted);
    CHECK(s.tokens_per_window() == Approx(1.0 + static_cast<double>(s.accepted) / static_cast<double>(s.windows)));
}

}  // namespace

TEST_CASE("spec: the acceptance rule emits tokens distributed as p", "[spec][stochastic]") {
    const std::vector<float> p = {0.05f, 0.4f, 0.0f, 0.25f, 0.2f, 0.1f};
    const std::vector<float> q = {0.3f, 0.1f, 0.2f, 0.0f, 0.3f, 0.1f};
    std::vector<double> pd(p.begin(), p.end());
    const int64_t n = 200000;
    // Critical value of chi-square with 4 degrees of freedom (5 cells with mass) at
    // p = 0.001: a correct rule fails this with probability 1e-3 (seeds are fixed).
    const double crit = 18.47;
    SECTION("a drafter that samples q") {
        std::mt19937_64 rng(1), draw(2);
        std::vector<int64_t> count(p.size(), 0);
        int64_t accepted = 0;
        for (int64_t i = 0; i < n; ++i) {
            const int32_t d = sample_index(q, std::uniform_real_distribution<double>(0, 1)(draw));
            const SlotOutcome o = verify_slot(p, q, d, rng);
            accepted += o.accepted;
            ++count[static_cast<size_t>(o.token)];
        }
        CHECK(chi_square(count, pd, n) < crit);
        // Acceptance rate = sum min(p, q) = 0.05 + 0.1 + 0 + 0 + 0.2 + 0.1.
        CHECK(static_cast<double>(accepted) / n == Approx(0.45).margin(0.01));
    }
    SECTION("a greedy drafter (q a point mass)") {
        for (int32_t d : {1, 2, 5}) {
            std::mt19937_64 rng(static_cast<uint64_t>(3 + d));
            std::vector<int64_t> count(p.size(), 0);
            int64_t accepted = 0;
            for (int64_t i = 0; i < n; ++i) {
                const SlotOutcome o = verify_slot(p, {}, d, rng);
                accepted += o.accepted;
                ++count[static_cast<size_t>(o.token)];
            }
            INFO("draft " << d);
            CHECK(chi_square(count, pd, n) < crit);
            CHECK(static_cast<double>(accepted) / n == Approx(p[static_cast<size_t>(d)]).margin(0.01));
        }
    }
    SECTION("the wrong rule is caught: always accepting the draft") {
        // Sanity of the test itself: a biased emitter must fail the bound.
        std::mt19937_64 draw(9);
        std::vector<int64_t> count(p.size(), 0);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t d = sample_index(q, std::uniform_real_distribution<double>(0, 1)(draw));
            if (p[static_cast<size_t>(d)] > 0) ++count[static_cast<size_t>(d)];
            else ++count[1];
        }
        CHECK(chi_square(count, pd, n) > crit);
    }
}

TEST_CASE("spec: a rollback from the window's kept GDN inputs leaves the replay's state bit for bit", "[spec][rollback]") {
    auto m = mtp_model();
    REQUIRE(m->hp().hybrid());
    const int64_t V = m->hp().n_vocab;
    const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8};
    const std::vector<int32_t> window = {40, 41, 42, 43};
    const std::vector<int32_t> after = {99, 17};
    for (int mode = 0; mode < 3; ++mode) {
        std::unique_ptr<Runner> r = mode == 0 ? make_local_runner(m, 2, 128, GgmlType::F16) : split2(m, mode == 2);
        INFO(r->describe());
        auto eval = [&](int seq, std::span<const int32_t> toks, float* out) {
            const Runner::Item it{seq, toks, true};
            r->eval(std::span<const Runner::Item>(&it, 1), out);
        };
        std::vector<float> scratch(prompt.size() * V);
        for (int64_t keep = 1; keep <= 4; ++keep) {
            INFO("keep " << keep);
            // Straight: the prompt, the kept rows, then two more tokens one window.
            const int a = r->new_sequence();
            eval(a, prompt, scratch.data());
            eval(a, std::span<const int32_t>(window.data(), static_cast<size_t>(keep)), scratch.data());
            std::vector<float> want(after.size() * V);
            eval(a, after, want.data());
            // Rolled back: the whole window after a snapshot for it, then back to `keep` rows.
            const int b = r->new_sequence();
            eval(b, prompt, scratch.data());
            r->snapshot(b, static_cast<int64_t>(window.size()));
            std::vector<float> win(window.size() * V);
            eval(b, window, win.data());
            REQUIRE(r->rollback(b, keep));
            CHECK(r->n_past(b) == static_cast<int64_t>(prompt.size()) + keep);
            CHECK_FALSE(r->rollback(b, 1));  // the window is settled
            std::vector<float> got(after.size() * V);
            eval(b, after, got.data());
            CHECK(got == want);
            r->free_sequence(a);
            r->free_sequence(b);
        }
        // Nothing kept: a snapshot not taken for a window, a longer keep than the window.
        const int c = r->new_sequence();
        eval(c, prompt, scratch.data());
        r->snapshot(c);
        eval(c, window, scratch.data());
        CHECK_FALSE(r->rollback(c, 2));
        CHECK(r->n_past(c) == static_cast<int64_t>(prompt.size() + window.size()));
        r->snapshot(c, 2);
        eval(c, std::span<const int32_t>(window.data(), 2), scratch.data());
        CHECK_FALSE(r->rollback(c, 3));
        CHECK(r->rollback(c, 2));
        r->free_sequence(c);
    }
}

TEST_CASE("spec: snapshot, restore and replay give the straight path's logits bit for bit", "[spec][rollback]") {
    auto m = mtp_model();
    const int64_t V = m->hp().n_vocab;
    const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8};
    const std::vector<int32_t> window = {40, 41, 42, 43};
    for (int mode = 0; mode < 3; ++mode) {
        std::unique_ptr<Runner> r = runner_of(m, mode);
        INFO(r->describe());
        auto eval = [&](int seq, std::span<const int32_t> toks, bool all, float* out) { eval_one(*r, seq, toks, all, out); };
        std::vector<float> scratch(prompt.size() * V);
        // Straight: prompt, then 40, 41, then 99 one by one.
        const int a = r->new_sequence();
        eval(a, prompt, false, scratch.data());
        std::vector<float> want(3 * V);
        for (int i = 0; i < 2; ++i) eval(a, std::span<const int32_t>(&window[i], 1), false, want.data() + i * V);
        const int32_t after = 99;
        eval(a, std::span<const int32_t>(&after, 1), false, want.data() + 2 * V);
        // Speculative: the whole window, rolled back, then 40, 41 replayed as one window.
        const int b = r->new_sequence();
        eval(b, prompt, false, scratch.data());
        CHECK(r->snapshot_bytes() == 0);
        r->snapshot(b);
        const size_t bytes = r->snapshot_bytes();
        CHECK(bytes > 0);
        std::vector<float> win(window.size() * V);
        eval(b, window, true, win.data());
        CHECK(std::equal(win.begin(), win.begin() + 2 * V, want.begin()));  // batch-invariant kernels
        CHECK(r->n_past(b) == 10);
        r->restore(b);
        CHECK(r->n_past(b) == 6);
        std::vector<float> got(3 * V);
        eval(b, std::span<const int32_t>(window.data(), 2), true, got.data());
        eval(b, std::span<const int32_t>(&after, 1), false, got.data() + 2 * V);
        CHECK(got == want);
        CHECK(r->n_past(b) == r->n_past(a));
        // A second snapshot reuses the buffer.
        r->snapshot(b);
        CHECK(r->snapshot_bytes() == bytes);
        r->free_sequence(a);
        r->free_sequence(b);
        CHECK(r->snapshot_bytes() == 0);
    }
}

TEST_CASE("spec: a lent snapshot's state is read from its buffer until each layer is written", "[spec][rollback]") {
    ThreadPool pool(2);
    CpuOps ops(pool);
    REQUIRE(ops.state_reads_elsewhere());
    SeqState s;
    s.gdn = std::make_unique<GdnState>(ops.allocator(), 3, 4, 8, 2, 4, 4);
    GdnState& g = *s.gdn;
    const int64_t per = g.all_ssm_rows() / g.n_layers() * g.ssm_row(), conv = g.conv_rows() * g.conv_dim();
    auto fill = [&](float base) {
        for (int64_t l = 0; l < 3; ++l) {
            for (int64_t i = 0; i < per; ++i) g.ssm(l)[i] = base + static_cast<float>(100 * l + i);
            for (int64_t i = 0; i < conv; ++i) g.conv(l)[i] = base - static_cast<float>(100 * l + i);
        }
    };
    auto holds = [&](int64_t l, const float* p, float base) {
        for (int64_t i = 0; i < per; ++i)
            if (p[i] != base + static_cast<float>(100 * l + i)) return false;
        return true;
    };
    fill(0.5f);
    StateSnapshot snap;
    snap.save(ops, s, /*lend=*/true);
    CHECK(g.reads_elsewhere());
    for (int64_t l = 0; l < 3; ++l) {
        CHECK(g.ssm_in(l) != g.ssm(l));  // no copy: the state before is the snapshot's
        CHECK(holds(l, g.ssm_in(l), 0.5f));
        CHECK(g.conv(l)[1] == 0.5f - static_cast<float>(100 * l + 1));  // the conv history was copied
    }
    // Layer 1 written (as the delta rule does: from ssm_in into ssm), the others not yet.
    for (int64_t i = 0; i < per; ++i) g.ssm(1)[i] = 7.0f + static_cast<float>(100 + i);
    g.wrote(1);
    CHECK(g.ssm_in(1) == g.ssm(1));
    CHECK(g.reads_elsewhere());
    StateSnapshot::settle(ops, g);  // before a whole-buffer read: the unread layers come home
    CHECK_FALSE(g.reads_elsewhere());
    CHECK(holds(0, g.ssm(0), 0.5f));
    CHECK(holds(1, g.ssm(1), 7.0f));
    CHECK(holds(2, g.ssm(2), 0.5f));
    // Back to the state the snapshot holds, again without a copy of the delta-rule states:
    // read from the snapshot's buffer until each layer is written (or settled).
    for (int64_t i = 0; i < conv; ++i) g.conv(2)[i] = 3.0f;
    snap.load(ops, s);
    CHECK(g.reads_elsewhere());
    for (int64_t l = 0; l < 3; ++l) {
        CHECK(g.ssm_in(l) != g.ssm(l));
        CHECK(holds(l, g.ssm_in(l), 0.5f));
        CHECK(g.conv(l)[1] == 0.5f - static_cast<float>(100 * l + 1));  // the conv histories were copied back
    }
    StateSnapshot::settle(ops, g);
    for (int64_t l = 0; l < 3; ++l) CHECK(holds(l, g.ssm(l), 0.5f));
    // Every layer written ends the reading from elsewhere; a snapshot that copies never starts it.
    snap.save(ops, s, true);
    for (int64_t l = 0; l < 3; ++l) g.wrote(l);
    CHECK_FALSE(g.reads_elsewhere());
    StateSnapshot copied;
    copied.save(ops, s);
    CHECK_FALSE(g.reads_elsewhere());
}

TEST_CASE("spec: a snapshot that lends its buffer gives the copies' states and logits", "[spec][rollback]") {
    // On the CPU a snapshot exchanges buffers with the sequence instead of copying the
    // delta-rule states (snapshot.h): each state is read from the snapshot's buffer until
    // its layer is written. Checked against the straight path: two snapshots in a row
    // (the second while the first is still read), a window and a restore, a copy of the
    // state to the host while it is read from elsewhere, and restoring one snapshot twice.
    auto m = mtp_model();
    const int64_t V = m->hp().n_vocab;
    const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8};
    const std::vector<int32_t> window = {40, 41, 42, 43};
    const int32_t after = 99;
    for (int mode = 0; mode < 3; ++mode) {
        std::unique_ptr<Runner> r = runner_of(m, mode);
        INFO(r->describe());
        auto eval = [&](int seq, std::span<const int32_t> toks, bool all, float* out) { eval_one(*r, seq, toks, all, out); };
        std::vector<float> scratch(prompt.size() * V), want(V), got(V);
        const int a = r->new_sequence();
        std::vector<uint8_t> rec_a(r->recurrent_bytes()), rec_b(r->recurrent_bytes());
        REQUIRE(!rec_a.empty());
        eval(a, prompt, false, scratch.data());
        for (int i = 0; i < 2; ++i) eval(a, std::span<const int32_t>(&window[i], 1), false, scratch.data());
        r->save_state(a, {}, rec_a.data());
        eval(a, std::span<const int32_t>(&after, 1), false, want.data());

        const int b = r->new_sequence();
        eval(b, prompt, false, scratch.data());
        r->snapshot(b);
        r->snapshot(b);  // the state still reads from the first one's buffer
        std::vector<float> win(window.size() * V);
        eval(b, window, true, win.data());
        r->restore(b);
        eval(b, std::span<const int32_t>(window.data(), 2), true, win.data());
        r->snapshot(b);
        r->save_state(b, {}, rec_b.data());  // read from the snapshot's buffer
        CHECK(rec_b == rec_a);
        for (int twice = 0; twice < 2; ++twice) {
            eval(b, std::span<const int32_t>(&after, 1), false, got.data());
            CHECK(got == want);
            r->restore(b);
        }
        std::fill(rec_b.begin(), rec_b.end(), 0);
        r->save_state(b, {}, rec_b.data());
        CHECK(rec_b == rec_a);
    }
}

TEST_CASE("spec: hidden rows and the MTP through a runner match the model", "[spec][mtp]") {
    auto m = mtp_model();
    const int64_t V = m->hp().n_vocab, E = m->hp().n_embd;
    const std::vector<int32_t> toks = {5, 9, 2, 77, 31, 8};
    const int64_t T = static_cast<int64_t>(toks.size());
    // Reference: the model directly.
    ThreadPool pool(1);
    CpuOps cpu_ops(pool);
    ForwardCtx ctx(cpu_ops, *m);
    SeqState s = m->new_state(ctx.ops, 128, GgmlType::F16);
    std::vector<float> h_ref(T * E), l_ref(T * V);
    const Model::BatchItem bi{&s, toks, true, h_ref.data()};
    m->eval_batch(ctx, std::span<const Model::BatchItem>(&bi, 1), l_ref.data());
    std::vector<float> ml_ref(T * V), mh_ref(T * E);
    const std::vector<int32_t> next = {9, 2, 77, 31, 8, 3};
    m->mtp_forward(ctx, s, h_ref.data(), next.data(), T, 0, ml_ref.data(), mh_ref.data());
    for (int mode = 0; mode < 2; ++mode) {
        std::unique_ptr<Runner> r = mode == 0 ? make_local_runner(m, 2, 128, GgmlType::F16) : split2(m, false);
        INFO(r->describe());
        REQUIRE(r->has_mtp());
        const int seq = r->new_sequence();
        std::vector<float> h(T * E), l(V);
        const Runner::Item it{seq, toks, false, h.data()};
        r->eval(std::span<const Runner::Item>(&it, 1), l.data());
        CHECK(h == h_ref);
        CHECK(std::equal(l.begin(), l.end(), l_ref.begin() + (T - 1) * V));
        std::vector<float> ml(V), mh(E);  // the last pair's rows (Runner::mtp)
        r->mtp(seq, h.data(), next.data(), T, 0, ml.data(), mh.data(), 0);
        CHECK(std::equal(mh.begin(), mh.end(), mh_ref.begin() + (T - 1) * E));
        CHECK(std::equal(ml.begin(), ml.end(), ml_ref.begin() + (T - 1) * V));
    }
}

TEST_CASE("spec: the MTP chain runs the LM head only where a draft reads its prediction, over the draft vocabulary", "[spec][mtp][draft-vocab]") {
    // A stand-in MTP whose prediction after (h, token) at position p is (token * 7 + p) % V
    // and whose hidden row carries the token, so every call and its inputs can be checked.
    constexpr int64_t E = 4, V = 50;
    struct Call {
        int64_t T, pos0;
        int32_t last;
        bool head;
        int64_t rows;
    };
    std::vector<Call> calls;
    const MtpCall mtp = [&](const float*, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                            float* hidden_out, int64_t rows) {
        calls.push_back({T, pos0, tokens[T - 1], logits != nullptr, rows});
        if (hidden_out) std::fill(hidden_out, hidden_out + E, static_cast<float>(tokens[T - 1]));  // the last pair's row
        if (logits) {
            std::fill(logits, logits + V, 0.0f);
            logits[(tokens[T - 1] * 7 + pos0 + T - 1) % V] = 5.0f;
        }
    };
    const std::vector<float> hidden(3 * E, 1.0f);
    const std::vector<int32_t> pairs = {4, 9, 11};
    const std::vector<int32_t> forced = {20, 21, 22};

    // The pipelined chain's shape: committed pairs, a window's drafts forced, then drafts.
    MtpChain chain(E, V, -1);  // auto: a vocabulary under its start is ranked whole
    chain.feed(mtp, hidden.data(), pairs.data(), 3, 10, /*logits=*/false);
    chain.force(mtp, forced);
    Draft d;
    chain.draft(mtp, 3, 0.0f, d);
    // feed, three forced steps, then the steps of drafts 2 and 3 (draft 1 is the last
    // forced step's prediction; draft 3's own step waits for a later call)
    REQUIRE(calls.size() == 6);
    CHECK(calls[0].T == 3);
    CHECK(calls[0].pos0 == 10);
    CHECK_FALSE(calls[0].head);
    for (int i = 0; i < 3; ++i) {
        CHECK(calls[1 + i].pos0 == 13 + i);
        CHECK(calls[1 + i].last == forced[static_cast<size_t>(i)]);
        CHECK(calls[1 + i].head == (i == 2));  // only the last forced step's prediction is read
    }
    const int32_t d1 = (22 * 7 + 15) % V, d2 = (d1 * 7 + 16) % V, d3 = (d2 * 7 + 17) % V;
    CHECK(d.tokens == std::vector<int32_t>{d1, d2, d3});
    CHECK(calls[4].last == d1);
    CHECK(calls[5].last == d2);
    CHECK((calls[4].head && calls[5].head));
    for (const Call& c : calls) CHECK(c.rows == 0);

    // A pending draft then forced tokens: the pending step's prediction is overridden too.
    calls.clear();
    chain.force(mtp, std::vector<int32_t>{30});
    REQUIRE(calls.size() == 2);
    CHECK(calls[0].last == d3);
    CHECK_FALSE(calls[0].head);
    CHECK(calls[1].last == 30);
    CHECK(calls[1].head);

    // A feed whose prediction was skipped cannot be drafted from.
    MtpChain bare(E, V, 0);
    bare.feed(mtp, hidden.data(), pairs.data(), 3, 0, /*logits=*/false);
    Draft none;
    CHECK_THROWS_WITH(bare.draft(mtp, 1, 0.0f, none), Catch::Contains("without its LM head"));
    bare.force(mtp, std::vector<int32_t>{});  // nothing forced: still no prediction
    CHECK_THROWS(bare.draft(mtp, 1, 0.0f, none));

    // A large vocabulary under auto: the chain's calls rank the draft vocabulary's rows,
    // which a feed's committed tokens widen before its own call (two of three past 4096).
    constexpr int64_t V2 = 20000;
    std::vector<int64_t> rows;
    const MtpCall wide = [&](const float*, const int32_t*, int64_t, int64_t, float* logits, float* hidden_out,
                             int64_t r) {
        rows.push_back(r);
        if (hidden_out) std::fill(hidden_out, hidden_out + E, 0.0f);
        if (logits) {
            std::fill(logits, logits + V2, -std::numeric_limits<float>::infinity());
            std::fill(logits, logits + (r > 0 ? r : V2), 0.0f);
            logits[3] = 1.0f;
        }
    };
    MtpChain big(E, V2, -1);
    CHECK(big.draft_rows() == 4096);
    const std::vector<int32_t> low = {1, 2, 3}, high = {5000, 6000, 7};
    big.feed(wide, hidden.data(), low.data(), 3, 0);
    Draft d4;
    big.draft(wide, 2, 0.0f, d4);
    big.feed(wide, hidden.data(), high.data(), 3, 3);
    CHECK(big.draft_rows() == 8192);
    CHECK(rows == std::vector<int64_t>{4096, 4096, 8192});  // feed, draft 2's step, feed
}

TEST_CASE("spec: greedy output is identical with speculation off and K = 1..4", "[spec][greedy]") {
    auto m = mtp_model();
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps", false);
    auto local = make_local_runner(m, 2, 128, GgmlType::F16);
    const auto want = gen(*local, tok, prompt, 0, 40);
    REQUIRE(want.size() >= 2);
    for (int mode = 0; mode < 3; ++mode) {
        std::unique_ptr<Runner> r = mode == 0 ? make_local_runner(m, 2, 128, GgmlType::F16) : split2(m, mode == 2);
        for (int k = 1; k <= 4; ++k) {
            INFO(r->describe() << " K=" << k);
            GenerateStats st;
            CHECK(gen(*r, tok, prompt, k, 40, &st) == want);
            CHECK(st.spec_draft == k);
            check_stats_add_up(st);
        }
    }
    // The default turns speculation on for a model with an MTP head.
    GenerateStats st;
    CHECK(gen(*local, tok, prompt, -1, 40, &st) == want);
    CHECK(st.spec_draft == 3);
    // Penalties decode plainly.
    SamplingParams pen;
    pen.repeat_penalty = 1.3f;
    gen(*local, tok, prompt, 3, 8, &st, pen);
    CHECK(st.spec_draft == 0);
}

TEST_CASE("spec: a draft vocabulary ranks only its tokens and keeps greedy output", "[spec][greedy][draft-vocab]") {
    auto m = mtp_model();
    const int64_t V = m->hp().n_vocab, E = m->hp().n_embd, D = 256;
    REQUIRE(V > D);
    const Tokenizer tok = Tokenizer::from_gguf(m->file());
    const std::vector<int32_t> prompt = tok.encode("The quick brown fox jumps", false);
    auto local = make_local_runner(m, 2, 128, GgmlType::F16);
    const auto want = gen(*local, tok, prompt, 0, 40);
    for (bool split : {false, true}) {
        SplitConfig cfg;
        cfg.wait_ms = 10000;
        cfg.draft_vocab = 200;  // rounded up to 256 by the drafters (DraftVocab), fixed
        SplitPlan plan;
        if (split) {
            const int64_t n = m->hp().n_layer;
            plan = plan_split("cpu:0,cpu:1", "auto", n, layer_weight_bytes(m->file(), n), head_weight_bytes(m->file()));
        } else {
            plan.stages.push_back({"cpu:0", 0, m->hp().n_layer});
        }
        auto r = make_split_runner(m, plan, 1, 128, GgmlType::F16, cfg);
        // The MTP's logits: the full head's over the first D ids, bit for bit; -inf after.
        auto full = make_local_runner(m, 1, 128, GgmlType::F16);
        std::vector<float> h(static_cast<size_t>(3 * E));
        for (size_t i = 0; i < h.size(); ++i) h[i] = std::sin(0.37f * static_cast<float>(i));
        const std::vector<int32_t> next = {7, 300, 12};
        std::vector<float> lr(static_cast<size_t>(V)), lf(static_cast<size_t>(V));
        const int sr = r->new_sequence(), sf = full->new_sequence();
        CHECK(r->draft_vocab() == 200);
        r->mtp(sr, h.data(), next.data(), 3, 0, lr.data(), nullptr, D);
        full->mtp(sf, h.data(), next.data(), 3, 0, lf.data(), nullptr, 0);
        CHECK(std::equal(lr.begin(), lr.begin() + D, lf.begin()));
        CHECK(std::all_of(lr.begin() + D, lr.end(), [](float x) { return std::isinf(x) && x < 0; }));
        // Greedy output unchanged; every draft is one of the first D ids.
        for (int k : {1, 3}) {
            GenerateOptions opt;
            opt.n_predict = 40;
            opt.n_batch = 4;
            opt.spec_draft = k;
            bool inside = true;
            opt.spec_edit_draft = [&](int64_t, int, Draft& d) {
                for (int32_t t : d.tokens) inside = inside && t < D;
            };
            std::vector<int32_t> out;
            generate(*r, tok, prompt, opt, [](std::string_view) { return true; }, &out);
            INFO(r->describe() << " K=" << k);
            CHECK(out == want);
            CHECK(inside);
        }
    }
}

TEST_CASE("spec: forced acceptances and rejections keep greedy output and state exact", "[spec][greedy][rollback]") {
    // Random weights make the MTP agree rarely, so the drafts are rewritten here: the
    // target's real continuation, with every fifth position made wrong. That covers
    // full acceptance (bonus token), partial acceptance (rollback + replay) and
    // immediate rejection. On every hybrid architecture: the rollback restores its GDN
    // state (qwen35's tiled heads included) on one device and on a two-stage split.
    for (auto arch : {synth::Arch::Qwen3Next, synth::Arch::Qwen35, synth::Arch::Qwen35Moe}) {
        INFO(synth::arch_name(arch));
        auto m = mtp_model(3, arch);
        const Tokenizer tok = Tokenizer::from_gguf(m->file());
        const std::vector<int32_t> prompt = {11, 12, 13, 14, 15};
        const int64_t n = 48, P = static_cast<int64_t>(prompt.size());
        auto plain = make_local_runner(m, 2, 128, GgmlType::F16);
        std::vector<int32_t> want = gen(*plain, tok, prompt, 0, n);
        if (static_cast<int64_t>(want.size()) < n) WARN("stopped at end of generation after " << want.size());
        for (int mode = 0; mode < 3; ++mode) {
            std::unique_ptr<Runner> r = mode == 0 ? make_local_runner(m, 2, 128, GgmlType::F16) : split2(m, mode == 2);
            for (int k : {1, 2, 4}) {
                INFO(r->describe() << " K=" << k);
                const int seq = r->new_sequence();
                std::vector<float> logits(m->hp().n_vocab), hidden(P * m->hp().n_embd);
                const Runner::Item it{seq, prompt, false, hidden.data()};
                r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
                Sampler sampler(SamplingParams{});
                const int32_t first = sampler.sample(logits);
                REQUIRE(first == want[0]);
                SpecOptions so;
                so.k = k;
                so.edit_draft = [&](int64_t pos, int k_round, Draft& d) {
                    // The token at position pos is want[pos - P]; drafts follow it.
                    const size_t kd = static_cast<size_t>(k_round);
                    d.tokens.clear();
                    for (size_t j = 0; j < kd && pos - P + 1 + static_cast<int64_t>(j) < static_cast<int64_t>(want.size()); ++j) {
                        const int64_t at = pos - P + 1 + static_cast<int64_t>(j);
                        int32_t t = want[static_cast<size_t>(at)];
                        if (at % 5 == 2) t = (t + 1) % static_cast<int32_t>(m->hp().n_vocab);
                        d.tokens.push_back(t);
                    }
                    d.probs.assign(d.tokens.size(), 1.0f);
                };
                SpecDecoder dec(*r, seq, sampler, so);
                dec.start(hidden.data(), prompt, first);
                std::vector<int32_t> got = {first};
                while (static_cast<int64_t>(got.size()) < static_cast<int64_t>(want.size()))
                    dec.step(static_cast<int64_t>(want.size()) - static_cast<int64_t>(got.size()), got);
                CHECK(got == want);
                const SpecStats& s = dec.stats();
                CHECK(s.accepted > 0);
                if (k > 1) CHECK(s.rollbacks > 0);
                CHECK(static_cast<int64_t>(got.size()) == 1 + s.windows + s.accepted);
                CHECK(r->n_past(seq) == P + static_cast<int64_t>(got.size()) - 1);
                r->free_sequence(seq);
            }
        }
    }
}

TEST_CASE("spec: stochastic speculation keeps the target distribution of the next token", "[spec][stochastic]") {
    // A fixed context, many independent speculative rounds with different seeds: the
    // first token each round emits (a kept draft or a correction) must follow the
    // target's p. A context where the MTP's draft has a middling target probability
    // is picked, so that both acceptances and resamples happen.
    auto m = mtp_model();
    const int64_t V = m->hp().n_vocab, E = m->hp().n_embd;
    auto r = make_local_runner(m, 2, 64, GgmlType::F16);
    SamplingParams sp;
    sp.temperature = 1.5f;
    sp.top_k = 8;
    const std::vector<int32_t> prompt = {5, 9, 2, 77, 31};
    std::vector<float> logits(V), hidden(prompt.size() * E);
    auto prefill = [&](int seq) {
        const Runner::Item it{seq, prompt, false, hidden.data()};
        r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
    };
    // The target p after prompt + first. The MTP of a random model rarely drafts a
    // token the truncated target keeps, so the draft is set (edit_draft) to the token
    // ranked second by p: the rule is exact for any point-mass draft, and a middling
    // p(draft) exercises both acceptance and resampling.
    const int32_t first = 3;
    std::vector<float> p;
    {
        const int seq = r->new_sequence();
        prefill(seq);
        const Runner::Item it{seq, std::span<const int32_t>(&first, 1), false};
        r->eval(std::span<const Runner::Item>(&it, 1), logits.data());
        Sampler(sp).probabilities(logits, p);
        r->free_sequence(seq);
    }
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    const int32_t draft = order[1];
    REQUIRE(p[draft] > 0.02f);
    REQUIRE(p[draft] < 0.9f);
    INFO("draft " << draft << " p(draft) " << p[draft]);
    const int64_t trials = 3000;
    std::vector<int64_t> count(V, 0);
    int64_t accepted = 0;
    for (int64_t i = 0; i < trials; ++i) {
        const int seq = r->new_sequence();
        prefill(seq);
        SamplingParams s = sp;
        s.seed = static_cast<uint64_t>(1000 + i);
        Sampler sampler(s);
        SpecOptions so;
        so.k = 2;
        so.edit_draft = [&](int64_t, int, Draft& d) {
            d.tokens.assign(2, draft);
            d.probs.assign(2, 1.0f);
        };
        SpecDecoder dec(*r, seq, sampler, so);
        dec.start(hidden.data(), prompt, first);
        std::vector<int32_t> out;
        dec.step(3, out);
        ++count[static_cast<size_t>(out.at(0))];
        accepted += dec.stats().accepted_at[0];
        r->free_sequence(seq);
    }
    std::vector<double> pd(p.begin(), p.end());
    // 8 kept tokens: 7 degrees of freedom, p = 0.001 -> 24.32.
    CHECK(chi_square(count, pd, trials) < 24.32);
    const double rate = static_cast<double>(accepted) / static_cast<double>(trials);
    CHECK(rate == Approx(p[draft]).margin(0.04));
}
