// Draft tokens from the model's own MTP head (MODEL_SPEC 4.11.4), chained k times.
//
// Position convention (vLLM's): the pair (H[p], x_{p+1}) -- the target's post-norm
// hidden state at position p and the token that followed it -- is stored at MTP
// position p. MTP positions therefore start at 0 and have no hole, and the MTP KV
// cache position p always describes the same pair as main position p.
//
// Consistency of the MTP KV cache (EAGLE/vLLM style): every draft() call first feeds
// all pairs committed since the last call, with the TARGET's hidden states, as one
// window (after the prompt: every prompt pair; after a verify window that accepted m
// drafts: m + 1 pairs). This rewrites the positions the previous chain filled with its
// own approximate hiddens; positions beyond are overwritten later.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/run/runner.h"
#include "engine/speculative/draft_vocab.h"

namespace strata {

struct Draft {
    std::vector<int32_t> tokens;  // d_1 .. d_k' (k' <= k: the chain may stop early)
    std::vector<float> probs;     // the MTP's softmax probability of each draft, at temperature 1
};

// Committed pairs the MTP has not seen yet: (H[p], x_{p+1}) for p = pos0 .. pos0 + size - 1,
// with H the target's post-norm hidden rows. Both decoders queue them after each window
// and feed them at the start of the next chain.
struct MtpPairs {
    std::vector<float> hidden;    // [size, n_embd]
    std::vector<int32_t> tokens;  // [size] the token after each hidden row
    int64_t pos0 = 0;

    int64_t size() const { return static_cast<int64_t>(tokens.size()); }
    // After the prompt pass: every prompt position from `from` on (prompt_hidden holds
    // their rows), the last followed by `first`.
    void from_prompt(const float* prompt_hidden, std::span<const int32_t> prompt, int32_t first, int64_t n_embd,
                     int64_t from = 0) {
        hidden.assign(prompt_hidden, prompt_hidden + (static_cast<int64_t>(prompt.size()) - from) * n_embd);
        tokens.assign(prompt.begin() + from + 1, prompt.end());
        tokens.push_back(first);
        pos0 = from;
    }
    // Empty, the next pair at position pos.
    void reset(int64_t pos) {
        hidden.clear();
        tokens.clear();
        pos0 = pos;
    }
    // rows pairs: hidden rows [rows, n_embd], the tokens after them.
    void append(const float* rows_hidden, std::span<const int32_t> next, int64_t n_embd) {
        hidden.insert(hidden.end(), rows_hidden, rows_hidden + static_cast<int64_t>(next.size()) * n_embd);
        tokens.insert(tokens.end(), next.begin(), next.end());
    }
    // Drops all but the newest n pairs unfed (n >= 1): the MTP's KV keeps whatever it
    // held at their positions (zeros, or an old chain's rows). While the default's
    // speculation is paused (SpecPolicy) this bounds the pending rows without paying an
    // MTP pass per plain token; the drafts after the pause see the newest n pairs.
    void keep_last(int64_t n, int64_t n_embd) {
        const int64_t drop = size() - n;
        if (drop <= 0) return;
        hidden.erase(hidden.begin(), hidden.begin() + drop * n_embd);
        tokens.erase(tokens.begin(), tokens.begin() + drop);
        pos0 += drop;
    }
};

// Pairs kept for the MTP while the default's speculation is paused (MtpPairs::keep_last).
inline constexpr int64_t kPausedPairs = 8;

// One MTP call: Runner::mtp's contract (pairs at MTP positions pos0.., logits of the
// last pair over the first draft_rows ids (0: all), optional hidden rows).
using MtpCall = std::function<void(const float* hidden, const int32_t* tokens, int64_t T, int64_t pos0, float* logits,
                                   float* hidden_out, int64_t draft_rows)>;

// The draft chain as a resumable object over an MtpCall, so that the pipelined loop can
// run it as one launch on the device that holds the MTP block (StagePipe::mtp_here)
// and continue it in a later launch. Not thread-safe: one launch at a time.
class MtpChain {
public:
    // draft_vocab: DraftVocab's setting (Runner::draft_vocab()).
    MtpChain(int64_t n_embd, int64_t n_vocab, int64_t draft_vocab, int64_t chunk = 256);

    // Feeds the committed pairs (hidden[t], next_tokens[t]) at MTP positions pos0 + t
    // (t < T, T >= 1; in chunks; the draft vocabulary observes next_tokens first): the
    // chain then stands after the last pair. logits =
    // false skips the LM head of the last pair (its prediction is not needed when force()
    // follows); only force() may follow such a feed.
    void feed(const MtpCall& mtp, const float* hidden, const int32_t* next_tokens, int64_t T, int64_t pos0,
              bool logits = true);
    // Teacher forcing through `tokens` in turn: each is the next token whatever the MTP
    // predicts (its chain input is the MTP's own hidden state, as in a free step). Only
    // the last step runs the LM head: the predictions of the others are overridden.
    void force(const MtpCall& mtp, std::span<const int32_t> tokens);
    // Up to n free greedy drafts appended to out (stops below min_p). The chain stands
    // before the last draft it appended (its prediction is known, its step not run), so
    // a later force()/draft() continues from there: `pending` tracks that draft.
    void draft(const MtpCall& mtp, int n, float min_p, Draft& out);
    // Committed tokens the chain is not fed (the prompt before start()'s `from`).
    void observe(std::span<const int32_t> tokens) { vocab_.observe(tokens); }
    int64_t draft_rows() const { return vocab_.rows(); }  // 0: every id

private:
    // One pair (current hidden, token); logits: run the LM head on its output.
    void step(const MtpCall& mtp, int32_t token, bool logits = true);
    // The ids the head computes in a call now: the draft vocabulary's prefix, or all.
    int64_t head_rows() const { return vocab_.rows() > 0 ? vocab_.rows() : static_cast<int64_t>(logits_.size()); }
    int64_t E_, chunk_;
    DraftVocab vocab_;
    std::vector<float> logits_;          // [n_vocab] prediction of the next token
    std::vector<float> exps_;            // [n_vocab] scratch of a draft's probability
    std::vector<float> hid_, hid_next_;  // the chain's current hidden row (last row of hid_)
    int64_t next_pos_ = 0;               // MTP position of the next pair
    bool pending_ = false;               // draft() appended a token whose step has not run
    bool have_logits_ = false;           // logits_ predicts the token after the chain's current pair
    int64_t live_ = 0;                   // logits_'s ids the head computed (the draft vocabulary's prefix)
    int32_t pending_token_ = 0;
};

class MtpDrafter {
public:
    // min_p: stop the chain when a draft's probability is below it (0 = never).
    // chunk: pairs per MTP window when catching up (a long prompt goes in pieces).
    MtpDrafter(Runner& runner, int seq, float min_p, int64_t chunk = 256);

    // Feeds the committed pairs (hidden[t] [n_embd], next_tokens[t]) at MTP positions
    // pos0 + t (t < T, T >= 1), then chains up to k greedy drafts: step 1 from the last
    // pair's output, each later step from its own hidden state and its own draft.
    // Drafts are the argmax of the MTP logits (ties to the lower id, as argmax()), so
    // the verifier treats q as a point mass; the probability is kept for --spec-draft-min-p
    // and for the statistics.
    void draft(const float* hidden, const int32_t* next_tokens, int64_t T, int64_t pos0, int k, Draft& out);
    MtpChain& chain() { return chain_; }

private:
    Runner& runner_;
    int seq_;
    float min_p_;
    MtpChain chain_;
    MtpCall call_;
};

}  // namespace strata
