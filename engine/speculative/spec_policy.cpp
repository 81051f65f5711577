#include "engine/speculative/spec_policy.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "engine/core/error.h"

namespace strata {

SpecChoice choose_spec(int64_t requested, int64_t engine_k, bool has_mtp, const SamplingParams& sp) {
    SpecChoice c;
    c.adaptive = requested < 0 && engine_k < 0;
    const int64_t k = requested >= 0 ? requested : engine_k >= 0 ? engine_k : (has_mtp ? kDefaultSpecK : 0);
    if (k <= 0) return c;
    if (!has_mtp) {
        c.off = SpecOff::NoMtp;
        return c;
    }
    if (sp.has_penalties() && sp.penalty_last_n != 0) {
        c.off = SpecOff::Penalties;
        return c;
    }
    c.k = static_cast<int>(std::min<int64_t>(k, kMaxSpecK));
    c.off = SpecOff::No;
    return c;
}

int adaptive_k_max(const SpecChoice& c, bool timed, bool greedy) {
    return c.adaptive && c.k > 0 && timed && greedy ? std::max(kAdaptiveMaxSpecK, c.k) : 0;
}

SpecPolicy::SpecPolicy(int k, bool adaptive, const SpecPolicyParams& p, bool greedy)
    : k_(k), adaptive_(adaptive), timed_(p.timed && greedy), p_(p), backoff_(p.backoff_first), try_every_(p.k_try_every) {
    STRATA_CHECK(k >= 1, "the speculation policy needs k >= 1, got {}", k);
    STRATA_CHECK(p.pause_at < 0 && p.credit_max > 0 && p.backoff_first >= 1 && p.backoff_max >= p.backoff_first &&
                     p.plain_mean_steps >= 1 && (p.k_max == 0 || (p.k_max >= k && p.k_max <= kMaxSpecK)) &&
                     p.k_try_every >= 1 &&
                     p.k_try_windows >= 1,
                 "bad speculation policy parameters");
}

int SpecPolicy::next_k() const {
    if (!adaptive_) return k_;
    return left_ == 0 && credit_ > 0 ? (trying_ ? trying_ : k_) : 0;
}

void SpecPolicy::adapt_k(int64_t drafted, int64_t accepted, double seconds, bool early) {
    if (p_.k_max <= 1) return;
    // The window ran with the K next_k() gave (it may have drafted fewer: the end of the
    // request, or --spec-draft-min-p), and counts for that K.
    const auto k = static_cast<size_t>(trying_ ? trying_ : k_);
    // Each position's verdicts count whatever the window's K: position i was tested when
    // the i - 1 before it were kept. Decayed by 0.97 a window (about the last 30), as the
    // agreement moves with the text.
    for (size_t i = 1; i <= static_cast<size_t>(kMaxSpecK); ++i) tested_[i] *= 0.97, kept_[i] *= 0.97;
    for (int64_t i = 1; i <= std::min(drafted, accepted + 1); ++i) {
        tested_[static_cast<size_t>(i)] += 1;
        if (i <= accepted) kept_[static_cast<size_t>(i)] += 1;
    }
    all_kept_ = 0.75 * all_kept_ + (accepted == drafted ? 0.25 : 0.0);
    if (trying_ && tried_++ == 0) return;  // a K's first window may grow its buffers
    // Seconds and windows summed with a decay of 3/4 per window (about the last four).
    const size_t c = early ? 1 : 0;
    sec_[c][k] = 0.75 * sec_[c][k] + seconds;
    cnt_[c][k] = 0.75 * cnt_[c][k] + 1;
    if (trying_) {
        if (tried_ <= p_.k_try_windows) return;
        const int cur = k_;
        // A move needs a rate 3% higher: noise alone should not walk K around (1% moved
        // K no better on this CPU).
        if (seconds_of(cur) <= 0 || rate(trying_) > 1.03 * rate(cur)) {
            paid_up_ = trying_ > k_ ? trying_ - k_ : 0;
            k_ = trying_;
            ++k_moves_;
            try_every_ = p_.k_try_every;
            failed_dir_ = failed_stride_ = 0;
            trying_ = 0;
            // A move that paid is followed by the next trial at once (the trial measured
            // the new K's rate already): a walk from 3 to 7 (the MoE preset at ~98%)
            // spent its first 40 windows climbing, a third of a 512-token request.
        } else {
            paid_up_ = 0;
            failed_dir_ = trying_ > k_ ? 1 : -1;
            failed_stride_ = std::abs(trying_ - k_);
            trying_ = 0;
            since_try_ = 0;
            try_every_ = std::min<int64_t>(2 * try_every_, 16 * p_.k_try_every);
            return;
        }
    } else if (++since_try_ < try_every_) {
        return;
    }
    since_try_ = 0;
    // Up while most windows keep every draft, else down. The way that just failed is
    // tried again one K further (up to kMaxStride): the rate is not smooth in K (a CPU's
    // window tiles take rows four at a time, so K = 4 can be slower than 3 and 5), and
    // a walk of single steps stopped at such a dip; past the stride, or the range, the
    // other way. After a step up that paid, the next trial up goes twice as far (to k_max
    // at most): where every draft is kept the best K is often the largest, and single
    // steps from 3 to 8 took most of a short request (bench/spec_policy_sim: a window
    // costing 1.05 + 0.05 K plain steps, as a GPU's verify should, at ~98% agreement and
    // 128 tokens: 0.82 -> 0.85 of the best fixed K).
    constexpr int kMaxStride = 3;
    const int dir = all_kept_ > 0.5 ? 1 : -1;
    const bool doubling = dir > 0 && paid_up_ > 0 && failed_dir_ != dir;
    const int stride = dir == failed_dir_ ? failed_stride_ + 1 : doubling ? 2 * paid_up_ : 1;
    int next = k_ + dir * stride;
    if (doubling && next > p_.k_max && k_ < p_.k_max) next = p_.k_max;
    if ((stride > kMaxStride && !doubling) || next < 1 || next > p_.k_max) {  // that way is done: one K the other way
        next = k_ - dir;
        if (next < 1 || next > p_.k_max) next = k_ + dir;
    }
    trying_ = next;
    tried_ = 0;
    for (size_t c = 0; c < 2; ++c)  // its cost from this trial
        sec_[c][static_cast<size_t>(trying_)] = cnt_[c][static_cast<size_t>(trying_)] = 0;
}

// A window's tokens as the positions' rates predict them, 1 + sum over i <= k of the
// chance that the first i drafts are kept, rather than the tokens the few windows of a
// trial happened to commit: one window that kept nothing, the last of the four counted
// (a trial is five windows, the decay weighing the last most), took about a quarter off
// that count, and the walk followed such luck (the MoE preset at ~90%: K went down to 2
// in three runs of three, 0.86x of --spec-draft 3 in 128 tokens). A position not yet
// tested often enough takes the rate of the one before it.
double SpecPolicy::expected_tokens(int k) const {
    double e = 1, chain = 1, c = 0.5;
    for (int i = 1; i <= k; ++i) {
        const auto at = static_cast<size_t>(i);
        if (tested_[at] >= 1) c = kept_[at] / tested_[at];
        chain *= c;
        e += chain;
    }
    return e;
}

double SpecPolicy::keep_chance(int k) const {
    double chain = 1, c = 0.5;
    for (int i = 1; i <= k; ++i) {
        const auto at = static_cast<size_t>(i);
        if (tested_[at] >= 1) c = kept_[at] / tested_[at];
        chain *= c;
    }
    return chain;
}

double SpecPolicy::seconds_of(int k) const {
    const auto at = static_cast<size_t>(k), kk = static_cast<size_t>(k_);
    auto mean = [](const double* sec, const double* cnt, size_t i) { return cnt[i] > 0 ? sec[i] / cnt[i] : 0.0; };
    double late = mean(sec_[0], cnt_[0], at), early = mean(sec_[1], cnt_[1], at);
    if (!p_.pipelined) return late;  // serial windows are all "late"
    if ((late > 0) != (early > 0)) {
        // Windows of one kind only (a trial of five windows may see no early one, or only
        // early ones): the other kind at the current K's ratio of the two.
        const double r_late = mean(sec_[0], cnt_[0], kk), r_early = mean(sec_[1], cnt_[1], kk);
        const double ratio = r_late > 0 && r_early > 0 ? r_early / r_late : 1;
        if (late <= 0) late = early / ratio;
        if (early <= 0) early = late * ratio;
    }
    // A window runs early when the one before it kept its K drafts and the guess of its
    // bonus token (as a first draft is kept).
    const double h = keep_chance(k) * keep_chance(1);
    return h * early + (1 - h) * late;
}

double SpecPolicy::rate(int k) const {
    const double s = seconds_of(k);
    return s > 0 ? expected_tokens(k) / s : 0;
}

double SpecPolicy::cost_of(int k) const {
    if (plain_s_ <= 0) return 0;
    if (const double s = seconds_of(k); s > 0) return s / plain_s_;
    // Not run at k yet: a plain step plus the current K's cost beyond one, by the drafts.
    if (const double s = seconds_of(k_); s > 0) return 1 + (s / plain_s_ - 1) * k / k_;
    return 0;
}

double SpecPolicy::window_cost(int k) const {
    // Not from one to three plain steps: a request's first (caches cold) took longer than
    // the rest, and window costs by it came out low (the MoE preset at ~98% on a CPU,
    // one plain step: 1.25 plain steps for a one-draft window, which costs ~1.45). At
    // least kMinWindowCost (on_probe).
    if (n_plain_s_ < std::min<int64_t>(kMinPlainSteps, static_cast<int64_t>(p_.plain_mean_steps))) return 0;
    const double c = cost_of(k);
    return c > 0 ? std::max(c, kMinWindowCost) : 0;
}

bool SpecPolicy::on_probe(bool kept) {
    // A probe is a one-draft window's verdict, counted against 1.5 tokens (pays_tokens):
    // a drafter kept less than half the time pauses within a few probes. Where a timed
    // one-draft window is known to be cheap (this request's windows, window_cost, else
    // earlier requests', SpecPolicyParams::window_cost_k1), the probe counts against that
    // cost instead: at ~1.1 plain steps a window (a GPU's verify should cost about one
    // step) K = 2-3 gain 1.12-1.42x at 30-45% agreement, which 1.5 sent to pauses
    // (bench/spec_policy_sim --a 1.05 --b 0.05 --carry 1, of the better of plain decoding
    // and the best fixed K: 0.84-0.87 -> 0.97-0.98 at 30%, 0.75-0.80 -> 0.98-0.99 at 45%).
    // Only below kCheapWindow: at the CPU presets' 1.45-1.5, a count of 1.45 let a third
    // missed probe through where 1.5 paused after two, and the windows it started lost
    // (the MoE preset at 30%, 128 tokens: 0.945 -> 0.915 of plain decoding). The cost is
    // kMinWindowCost at least, a carried one too: below one plain step the clock misled
    // (0.69 was seen in the server), and a probe counted against one token or less never
    // lowers the credit when missed.
    constexpr double kCheapWindow = 1.3;
    double cost = 0;
    if (timed_) cost = window_cost(1);
    if (timed_ && cost <= 0) cost = p_.window_cost_k1;
    cost = cost > 0 ? std::max(cost, kMinWindowCost) : p_.pays_tokens;
    return judge(1, kept ? 1 : 0, cost < kCheapWindow ? cost : p_.pays_tokens);
}

bool SpecPolicy::probe() const { return adaptive_ && left_ == 0 && credit_ <= 0; }

bool SpecPolicy::on_window(int64_t drafted, int64_t accepted, double seconds, bool early_kept) {
    const bool early = std::exchange(ran_early_, p_.pipelined && early_kept);
    if (!adaptive_ || drafted <= 0) return false;  // a window without drafts says nothing
    double pays = p_.pays_tokens;
    // Timed, a window pays when it commits more tokens than the plain steps it cost, however
    // few: where one costs ~1.1 (a GPU's verify), a floor of 1.5 tokens stopped windows
    // that gained; where one costs 1.5 or more (a CPU's) the two rules agree.
    if (timed_ && seconds > 0 && plain_s_ > 0 && timed_windows_++ > 0) {
        pays = seconds / plain_s_;
        adapt_k(drafted, accepted, seconds, early);
    }
    return judge(drafted, accepted, pays);
}

bool SpecPolicy::judge(int64_t drafted, int64_t accepted, double pays) {
    if (!adaptive_ || drafted <= 0) return false;
    // The cap holds at least one window's cost, so that one window that keeps nothing,
    // after a good run, does not stop drafting however many plain steps a window costs
    // (at K = 7 on the MoE preset one costs ~5: with a cap of 3 a single early rejection
    // sent the default to probes, two to a pause of 64 plain tokens).
    const double cap = std::max(p_.credit_max, pays);
    credit_ = std::min(cap, credit_ + static_cast<double>(accepted + 1) - pays);
    if (credit_ > 0 && probing_) {  // back: the next pause starts from the first backoff
        probing_ = false;
        backoff_ = p_.backoff_first;
    }
    if (credit_ > p_.pause_at) return false;
    // Where K walks, windows that do not pay step down to half their K before drafting
    // pauses, when the positions' rates say that K would beat plain decoding by 5%: a
    // shorter window costs less, and at ~60% agreement K = 1 or 2 pays where 3 does not
    // (the dense hybrid: fixed K = 2 1.12x plain decoding, K = 3 1.03x, docs/spec.md).
    // Its cost is guessed from K's: a plain step plus K's cost beyond one, by the drafts.
    // At ~30% agreement no K pays, and the pause comes as before. The walk goes on from
    // there.
    const int down = std::max(1, k_ / 2);
    if (p_.k_max > 1 && timed_ && k_ > 1 && cost_of(k_) > 0 && expected_tokens(down) > 1.05 * cost_of(down)) {
        k_ = down;
        ++k_moves_;
        trying_ = 0;
        since_try_ = 0;
        try_every_ = p_.k_try_every;
        credit_ = p_.pays_tokens - 1;  // as a kept probe leaves it: the next window at the new K
        return false;
    }
    left_ = backoff_;
    backoff_ = std::min(p_.backoff_max, backoff_ * 2);
    probing_ = true;
    // The probe after the pause pauses again at once if it is not kept.
    credit_ = p_.pause_at + (p_.pays_tokens - 1);
    ++pauses_;
    return true;
}

void SpecPolicy::on_plain(double seconds) {
    ran_early_ = false;  // a plain step finished the pipelined decoder
    if (!adaptive_) return;
    if (timed_ && seconds > 0) {  // a running mean, then an exponential one of weight 1/plain_mean_steps
        // A step more than twice the mean counts as twice the mean: one slow step (12.5 ms
        // among 3 ms ones in the server, a fault or a wake-up) lifted the mean of a few
        // by a third, and every window's cost in plain steps came out that much lower.
        if (n_plain_s_ >= 2) seconds = std::min(seconds, 2 * plain_s_);
        n_plain_s_ = std::min<int64_t>(n_plain_s_ + 1, static_cast<int64_t>(p_.plain_mean_steps));
        plain_s_ += (seconds - plain_s_) / static_cast<double>(n_plain_s_);
    }
    if (left_ > 0) --left_;
    else ++probes_;
    ++plain_;
}

}  // namespace strata
