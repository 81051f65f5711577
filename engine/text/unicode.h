// UTF-8 helpers and the GPT-2 byte-level alphabet (MODEL_SPEC 7.2). Everything here
// accepts arbitrary bytes: invalid UTF-8 is reported, never undefined behaviour.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::text {

// Code point that GPT-2's byte-level BPE uses for byte b (0x20 -> U+0120 'Ġ').
uint32_t byte_to_codepoint(uint8_t b);
// Inverse: the byte for a byte-level code point, or -1 when cp is not in the alphabet.
int codepoint_to_byte(uint32_t cp);
// UTF-8 of byte_to_codepoint(b) for every byte of `bytes`.
std::string bytes_to_byte_level(std::string_view bytes);

void append_utf8(std::string& out, uint32_t cp);

// Length of the well-formed UTF-8 sequence at s[pos] (1..4), or 0 when the bytes there
// are not a complete, valid sequence (overlongs, surrogates and > U+10FFFF rejected).
size_t utf8_valid_len(std::string_view s, size_t pos);
// Decode the sequence of length n = utf8_valid_len(s, pos) (> 0).
uint32_t utf8_decode(std::string_view s, size_t pos, size_t n);

// Length of the trailing bytes of s that form the beginning of a valid sequence that
// is cut short (0..3): what a streaming decoder must hold back for the next token.
size_t utf8_incomplete_tail(std::string_view s);

// s with every invalid byte sequence replaced by U+FFFD (one per maximal invalid run
// of bytes that cannot start a valid sequence, as WHATWG decoders do per byte).
std::string sanitize_utf8(std::string_view s);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace strata::text
