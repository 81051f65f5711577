// Streaming detokenization: ids arrive one at a time during generation, and a UTF-8
// character may be spread over several byte-level tokens. Only complete, valid UTF-8
// is emitted; an incomplete tail waits for the next token.
#pragma once
#include <cstdint>
#include <string>

namespace strata {

class Tokenizer;

class StreamingDetokenizer {
public:
    // The tokenizer must outlive this object.
    explicit StreamingDetokenizer(const Tokenizer& tok, bool render_special = false);

    // Feed one id; returns the text that is now complete (often empty). Invalid
    // sequences in the middle of the stream come out as U+FFFD.
    std::string push(int32_t id);
    // End of stream: whatever is held back, an incomplete tail replaced by U+FFFD.
    std::string flush();
    // Start a new stream (also re-arms SentencePiece's leading-space removal).
    void reset();

private:
    const Tokenizer* tok_;
    bool render_special_;
    bool at_start_ = true;
    std::string pending_;  // bytes held back: a prefix of one UTF-8 character
};

}  // namespace strata
