// The draft vocabulary: how many rows of the LM head an MTP draft step ranks
// (--spec-draft-vocab; docs/spec.md "The draft vocabulary").
//
// A draft step of a small model is mostly its LM head (a 32k x 1024 head is a quarter of a
// 160 MB model's step, a 150k one most of it), so the MTP ranks only the first N token ids:
// BPE vocabularies number tokens by merge order, so low ids are the frequent ones (the bet
// of FR-Spec's frequency-ranked subsets). Verification keeps every id, so greedy output
// never changes and sampling keeps the target distribution; a token past N can only cost
// an acceptance.
//
// auto starts at kAutoStart ids and doubles N (up to the whole vocabulary) whenever more
// than 1 in kMissRatio of the last kHistory committed tokens (at least kMinMisses of them)
// lie past it: text whose tokens the prefix does not hold (code, another script, a
// tokenizer not ordered by frequency) widens it within a few tokens, and a prompt moves it
// before the first draft. It never narrows. Its state depends only on the committed
// tokens, in order, never on the clock, so a seeded sampled request drafts the same on
// every run.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

class DraftVocab {
public:
    static constexpr int64_t kAutoStart = 4096;
    static constexpr int64_t kHistory = 256;
    static constexpr int64_t kMissRatio = 64;
    static constexpr int64_t kMinMisses = 2;

    // setting: 0 = every id; N > 0 = the first N ids (rounded up to 256), fixed; -1 = auto.
    // Throws for a setting below -1.
    DraftVocab(int64_t n_vocab, int64_t setting);

    // Rows for Runner::mtp: a multiple of 256 below n_vocab, or 0 for every id.
    int64_t rows() const { return n_ >= n_vocab_ ? 0 : n_; }
    // Committed tokens in order (the prompt, then what each window kept).
    void observe(std::span<const int32_t> tokens);

private:
    int64_t misses() const;  // history tokens at or past n_
    int64_t n_vocab_;
    int64_t n_;  // ids ranked, >= n_vocab_: all
    bool adapt_;
    std::vector<int32_t> ring_;  // the last kHistory committed tokens
    size_t next_ = 0;            // where the next one goes once ring_ is full
};

}  // namespace strata
