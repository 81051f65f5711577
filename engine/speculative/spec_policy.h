// When the default speculation drafts, and how many tokens (docs/spec.md, "The default
// K"). One object per request, used by generate() (strata run) and by the server's
// scheduler: fed each verify window's drafted / accepted counts and each plain step,
// it says whether the next step drafts and with which K.
//
// An explicit K (--spec-draft K, a request's spec_draft) is honoured as given: every
// step drafts K. The default (spec_draft -1) adapts:
//
//  - Credit. Each window that proposed drafts adds (tokens it committed) - 1.5 to a
//    credit that starts at 0 and is capped at +3: a window that keeps at least one draft
//    pays, one that keeps none costs 0.5. The credit is a CUSUM of "does it pay": a
//    drafter that agrees most of the time stays at the cap, one that never agrees falls.
//  - Probes. While the credit is not positive the step is a plain one with a shadow
//    probe: the drafter's first draft for that step (SpecDecoder::guess) is compared with
//    the token the plain step produces, which is exactly the verdict a one-draft window
//    would have given, at the cost of one MTP step instead of a two-row verify and a
//    replay (about 0.25 vs 2 plain steps on this repository's CPU). A probe counts as a
//    one-draft window. So a request starts with probes, and full-K windows follow once a
//    probe was kept (credit 0.5).
//  - Pause. At credit <= -1 drafting pauses for a backoff of plain steps, 64 at first,
//    with no MTP work at all: from the start after two missed probes; after a good run
//    after six full-K windows that kept nothing and two missed probes (a drafter kept
//    70% of the time pauses about once in 10,000 windows). Then one probe: if it is not
//    kept the pause resumes with twice the backoff (capped at 1024); once the credit is
//    positive again the drafter is back and the next pause starts from 64.
//
//  - Cost (greedy requests, when the caller times its steps). A window pays only when it
//    commits more tokens than it cost in plain steps: each timed window adds (tokens) -
//    (its time / a plain step's), a plain step's time being the running mean of the timed
//    plain steps (probes and pauses), and the first timed window (buffers allocated,
//    caches cold) counted by acceptance only. The cap is then the larger of 3 and the
//    window's cost: after a good run one window that keeps nothing never stops drafting
//    (two in a row can). A probe counts against the cost of a one-draft window where that
//    is known to be below 1.3 plain steps (window_cost(1), else the caller's
//    window_cost_k1 from earlier requests), else against 1.5 tokens. On a CPU where a
//    K = 3 verify window costs two to four plain steps this stops the default at ~60%
//    agreement, where it lost up to a third of the speed; where a window costs about one
//    step (expected of a GPU, not yet measured) windows go on down to ~20% agreement,
//    where they still gain (bench/spec_policy_sim). Greedy text does not depend on which
//    steps draft.
//
//  - K (timed requests, when the caller gives a range: k_max). The default starts at
//    kDefaultSpecK and moves between 1 and k_max by the tokens per second its windows
//    would commit: the tokens a K-window is expected to commit from each draft
//    position's rate of being kept (pooled over all windows, whatever their K), over the
//    measured seconds of that K's windows. Every k_try_every windows it runs another K
//    for 1 + k_try_windows windows (the first not counted) and moves there when that
//    K's rate is 3% higher: the next K up while most windows keep every draft, else the
//    next down; after a trial that failed, the same way one K further (up to three
//    away), then the other way, and twice as many windows before the next trial (up to
//    16 k_try_every); after a move that paid, the next trial starts at once, and after
//    one up, twice as far up (to k_max at most). Windows
//    that do not pay (the credit at pause_at) halve K instead of pausing while the rates
//    say the halved K beats plain decoding. On this repository's CPU the best fixed K
//    was 1-2 at ~60% agreement and 8 or more at ~98%, and K = 2..6 ran within the noise
//    of each other at ~90% (docs/benchmarks.md, docs/spec.md),
//    and the rate is not smooth in K (the window tiles take rows four at a time: K = 4
//    ran slower than 3 and 5), which stopped a walk of single steps at 3.
//    bench/spec_policy_sim runs the policy on a simulated clock against every fixed K.
//  - Pipelined K (--pipeline-windows 2). A window runs early, beside the one before it,
//    only when that one kept all its drafts and the guess of its bonus token, so a
//    pipelined step's seconds depend on the verdict before it: about half a window
//    after a kept early window, a whole one after a miss. The walk keeps the two kinds
//    of step apart per K and weighs them by the chance, from the positions' rates, that
//    a K-window's predecessor kept its early window (its K drafts kept, and a first
//    draft's rate for the guess). A window's tokens and that chance both come from the
//    rates, so the few windows of a trial move K by their cost, not by their luck: a
//    trial's measured seconds, hits and misses mixed, sent the walk to K = 5 at ~90%
//    agreement where K = 1 was best (docs/spec.md, "Which K").
//
// Without timing it reads only the acceptance, never the clock, so which steps draft is
// the same on every run; sampled requests are never timed, so a seeded sampled request's
// text does not depend on timing (docs/spec.md).
#pragma once
#include <cstdint>

#include "engine/sample/sampler.h"

namespace strata {

// Whether and with which K a request speculates: the one rule for strata run and the
// server. requested: the request's K (spec_draft; -1 = the default); engine_k: the
// default (--spec-draft; -1 = kDefaultSpecK when the model has an MTP head). Off (k = 0)
// without an MTP head, and with penalties (the penalties of draft i would depend on the
// drafts before it). Only the default adapts (SpecPolicy); an explicit K is honoured.
constexpr int kDefaultSpecK = 3;
constexpr int kMaxSpecK = 64;
// The largest K the default adapts up to (SpecPolicy, "K"): a timed request's decoder
// is built for it.
constexpr int kAdaptiveMaxSpecK = 8;
enum class SpecOff { No, Asked, NoMtp, Penalties };  // why speculation is off (No: it is on)
struct SpecChoice {
    int k = 0;
    bool adaptive = false;
    SpecOff off = SpecOff::Asked;
};
SpecChoice choose_spec(int64_t requested, int64_t engine_k, bool has_mtp, const SamplingParams& sp);
// The range of the default's K walk ("K" below; SpecPolicyParams::k_max): for the default K
// of a timed greedy request, max(kAdaptiveMaxSpecK, c.k), which its decoder must be built
// for; else 0 (K stays).
int adaptive_k_max(const SpecChoice& c, bool timed, bool greedy);

struct SpecPolicyParams {
    double pays_tokens = 1.5;       // a window pays when it commits at least this many tokens
    double credit_max = 3.0;        // cap of the credit: a good past covers 6 windows that keep nothing
    double pause_at = -1.0;         // pause when the credit falls to this
    int64_t backoff_first = 64;     // plain steps of the first pause
    int64_t backoff_max = 1024;     // cap of the doubling backoff
    double plain_mean_steps = 16;   // timed plain steps' running mean: weight 1/n up to 1/this
    bool timed = true;              // greedy requests weigh the measured cost ("Cost" above)
    int k_max = 0;                  // "K" above: K moves within 1 .. k_max (0: K does not move)
    int64_t k_try_every = 4;        // timed windows between tries of a neighbouring K (doubling while they fail)
    int64_t k_try_windows = 4;      // timed windows a tried K runs (after its first) before the rates are compared
    // Plain steps a one-draft window cost in earlier requests on this runner (their
    // window_cost(1); 0: unknown): a timed request's probes are weighed against it until
    // its own windows are timed ("Cost"; on_probe).
    double window_cost_k1 = 0;
    // The windows are pipelined (--pipeline-windows 2): each on_window says whether its
    // verdict kept the early window started beside it, and "K" weighs a K by what its
    // windows cost after a kept early window and after none ("Pipelined K").
    bool pipelined = false;
};

class SpecPolicy {
public:
    // k: drafts per window (> 0). adaptive: the default K (else k is honoured as given).
    // greedy: the request decodes greedily, so the measured cost may count (p.timed).
    SpecPolicy(int k, bool adaptive, const SpecPolicyParams& p = {}, bool greedy = false);

    // Drafts for the next step: 0 = a plain step (probing or paused), else the K in use.
    int next_k() const;
    // The K windows use now (after the "K" rule's moves) and the times it moved.
    int k() const { return k_; }
    int64_t k_moves() const { return k_moves_; }
    // The next plain step carries a shadow probe (next_k() is 0 and drafting is not paused).
    bool probe() const;
    bool paused() const { return left_ > 0; }
    bool adaptive() const { return adaptive_; }

    // After a verify window that proposed `drafted` drafts and kept `accepted` of them,
    // in `seconds` (0: not timed); early_kept (pipelined windows): its verdict kept the
    // early window started beside it, so the next window ran early. Returns true when
    // this window paused drafting.
    bool on_window(int64_t drafted, int64_t accepted, double seconds = 0, bool early_kept = false);
    // After a plain step taken because next_k() was 0 (call it before on_probe), in
    // `seconds` (the step alone, without the probe's MTP work; 0: not timed).
    void on_plain(double seconds = 0);
    // After the plain step of a probe: whether the drafter's guess was the token it
    // produced (as a one-draft window). Returns true when this paused drafting.
    bool on_probe(bool kept);

    double credit() const { return credit_; }
    int64_t pause_left() const { return left_; }  // plain steps left in the current pause
    int64_t backoff() const { return backoff_; }  // length of the next pause
    int64_t pauses() const { return pauses_; }    // times drafting paused
    int64_t plain_steps() const { return plain_; }  // plain steps the policy asked for (probes, pauses)
    int64_t probes() const { return probes_; }
    double plain_seconds() const { return plain_s_; }  // the timed plain steps' mean (0: none yet)
    // Plain steps a window of k drafts costs by this request's timed windows: measured at
    // k, or guessed from the current K's (a plain step plus its cost beyond one, by the
    // drafts), kMinWindowCost at least; 0 while none is timed or fewer than
    // kMinPlainSteps plain steps were. A caller keeps window_cost(1) for its next
    // requests (SpecPolicyParams::window_cost_k1).
    double window_cost(int k) const;
    static constexpr int64_t kMinPlainSteps = 4;  // timed plain steps window_cost needs
    static constexpr double kMinWindowCost = 1.05;  // plain steps a window costs at least (window_cost, on_probe)
    const SpecPolicyParams& params() const { return p_; }

private:
    int k_;
    bool adaptive_;
    bool timed_;
    SpecPolicyParams p_;
    double plain_s_ = 0;       // mean seconds of a timed plain step
    int64_t n_plain_s_ = 0;    // timed plain steps seen
    int64_t timed_windows_ = 0;
    double credit_ = 0;
    int64_t backoff_ = 0;  // next pause length
    int64_t left_ = 0;     // plain steps left in the current pause
    bool probing_ = false;  // after a pause, until the credit is positive again
    int64_t pauses_ = 0, plain_ = 0, probes_ = 0;
    // "K": seconds and counts of timed windows per K (decayed sums of the last few), each
    // draft position's tests and keeps over every timed window (decayed more slowly), the
    // K under trial (0: none), and the trial's bookkeeping.
    // Pipelined, [1] holds the windows that ran early (the verdict before them kept
    // theirs) and [0] the rest; serial windows are all in [0].
    double sec_[2][kMaxSpecK + 1] = {};
    double cnt_[2][kMaxSpecK + 1] = {};
    bool ran_early_ = false;  // pipelined: the next window runs early (the last verdict kept its early window)
    double tested_[kMaxSpecK + 1] = {};
    double kept_[kMaxSpecK + 1] = {};
    int trying_ = 0, failed_dir_ = 0;  // failed_dir_: the direction of the last trial, if it failed
    int failed_stride_ = 0;            // and how far from K it was
    int paid_up_ = 0;                  // the stride of the last move, where it went up and paid
    double all_kept_ = 0;              // decayed share of windows that kept every draft
    int64_t since_try_ = 0, tried_ = 0, k_moves_ = 0;
    int64_t try_every_ = 4;  // windows between trials: k_try_every, doubled by each failed trial
    bool judge(int64_t drafted, int64_t accepted, double pays);  // the credit's rule, and the pause
    void adapt_k(int64_t drafted, int64_t accepted, double seconds, bool early);
    double cost_of(int k) const;          // window_cost without its guards: the step down's guess
    double expected_tokens(int k) const;  // "K": tokens a window of k drafts commits, by the positions' rates
    double keep_chance(int k) const;      // the chance that a window keeps its first k drafts, by the same rates
    double rate(int k) const;             // expected_tokens(k) per second of k's windows
    double seconds_of(int k) const;       // a window of k's expected seconds (0: none timed)
};

}  // namespace strata
