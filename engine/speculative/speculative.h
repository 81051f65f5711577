// Serial speculative decoding of one sequence with the model's MTP head (docs/spec.md):
// draft k tokens, verify [last, d_1..d_k] in one window through every stage, commit
// the accepted drafts plus one token from the target, roll the recurrent state back
// when a draft was rejected (snapshot before the window, restore, replay the kept
// tokens), and feed the committed pairs to the MTP before the next chain.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/run/runner.h"
#include "engine/sample/grammar_matcher.h"
#include "engine/sample/sampler.h"
#include "engine/speculative/mtp_drafter.h"
#include "engine/speculative/spec_policy.h"
#include "engine/speculative/speculator.h"
#include "engine/speculative/verifier.h"

namespace strata {

struct SpecOptions {
    int k = 3;              // drafts per window (--spec-draft)
    float draft_min_p = 0;  // stop the chain below this draft probability (--spec-draft-min-p)
    // Test seam: called with the verify window's first position, the round's k and the
    // chain's drafts, which it may rewrite (at most k; tests force acceptances and
    // rejections with it: random test models accept almost nothing on their own).
    std::function<void(int64_t pos, int k, Draft&)> edit_draft;
    // The request's grammar (null: none): verification picks each position's token under
    // it and advances it through the kept drafts (verify_window); the caller accepts the
    // tokens of plain steps and each round's final token. It must outlive the decoder.
    GrammarMatcher* matcher = nullptr;
};

struct SpecStats {
    int64_t windows = 0;    // verify windows (one per decode step, drafts or not)
    int64_t drafted = 0;    // draft tokens proposed
    int64_t accepted = 0;   // draft tokens the target kept
    int64_t rollbacks = 0;  // windows that restored the snapshot and replayed
    std::vector<int64_t> drafted_at, accepted_at;  // [i]: drafts proposed / kept at chain position i + 1
    size_t snapshot_bytes = 0;  // rollback memory of the sequence
    int64_t draft_rows = 0;     // the draft vocabulary (DraftVocab::rows(); 0: every id), as last seen

    // One verify window that proposed kd drafts and kept the first m.
    void add_window(int64_t kd, int64_t m) {
        ++windows;
        drafted += kd;
        accepted += m;
        for (int64_t i = 0; i < kd; ++i) ++drafted_at[static_cast<size_t>(i)];
        for (int64_t i = 0; i < m; ++i) ++accepted_at[static_cast<size_t>(i)];
    }

    double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0; }
    double acceptance_at(size_t i) const {
        return i < drafted_at.size() && drafted_at[i] > 0
                   ? static_cast<double>(accepted_at[i]) / static_cast<double>(drafted_at[i])
                   : 0;
    }
    // Tokens committed per window: the accepted drafts plus the target's own token.
    double tokens_per_window() const {
        return windows > 0 ? static_cast<double>(accepted + windows) / static_cast<double>(windows) : 0;
    }
};

class SpecDecoder final : public Speculator {
public:
    // sampler: the request's sampler (its penalties must be off: the caller decodes
    // serially otherwise). A window's tokens are the ones it draws at their positions
    // (verify_window), so its accepted tokens must end where the window starts.
    SpecDecoder(Runner& runner, int seq, const Sampler& sampler, const SpecOptions& opt);

    // After the prompt pass: hidden rows [n_prompt, n_embd] of every prompt token
    // (Runner::Item::hidden_out), the prompt, and the first token sampled from its
    // logits (emitted, not yet evaluated).
    void start(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first, int64_t from = 0) override;

    // One round: at most max_emit (>= 1) tokens are committed and appended to out (the
    // accepted drafts, then the target's correction or bonus token). The sequence's
    // state then holds every committed token but the last, as after plain decoding.
    // k: drafts for this round, 1..SpecOptions::k (0: SpecOptions::k; SpecPolicy::next_k).
    void step(int64_t max_emit, std::vector<int32_t>& out, int k = 0) override;
    void finish() override {}  // the state is plain decoding's after every step

    const SpecStats& stats() const override { return stats_; }

    // For callers that mix speculative rounds with plain decoding (the server's
    // scheduler decodes a slot plainly while it shares a window with others):
    // a token committed outside step(). hidden: the target's post-norm hidden row of
    // the last committed token, from the plain window that evaluated it
    // (Runner::Item::hidden_out); next: the token sampled from that window, which
    // becomes the last committed token. The pair joins those the MTP has not seen;
    // beyond 256 of them all but the newest are fed to the MTP now, so the pending
    // rows stay bounded however long the sequence decodes plainly. paused: the default's
    // speculation is paused (SpecPolicy): only the newest kPausedPairs pairs are kept and
    // nothing runs on the MTP, so a paused decoder costs a plain step nothing.
    void advance(const float* hidden, int32_t next, bool paused = false) override;

    // A shadow probe (SpecPolicy::probe): feeds the pending pairs to the MTP and returns
    // the first draft a round started now would verify (after edit_draft), or -1 when the
    // chain gives none (--spec-draft-min-p). The caller then decodes the last committed
    // token plainly and compares the token it gets; the state is not touched.
    int32_t guess() override;
    bool settle(std::vector<float>& row) override;

    // The target's logits row [n_vocab] (post-penalty: penalties are off here) of the
    // i-th token the last step() appended, i.e. the distribution it was chosen from
    // (for logprobs). Valid until the next step().
    std::span<const float> logits(size_t i) const override;

private:
    void feed_but_newest();  // all pending pairs but the newest to the MTP
    Runner& runner_;
    int seq_;
    const Sampler& sampler_;
    SpecOptions opt_;
    MtpDrafter drafter_;
    RunnerTarget target_;  // before verifier_, which refers to it
    Verifier verifier_;
    SpecStats stats_;

    int32_t last_ = 0;                 // committed, not yet evaluated
    MtpPairs pend_;  // committed pairs the MTP has not seen

    Draft draft_;
    std::vector<int32_t> window_;
    std::vector<float> probs_;  // [n_vocab]
};

}  // namespace strata
