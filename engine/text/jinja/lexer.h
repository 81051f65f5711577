// The lexer: template source to tokens, applying jinja2's whitespace control as HF
// configures it (trim_blocks: the newline after a block or comment tag goes;
// lstrip_blocks: spaces and tabs before one on its line go; "-" on a tag strips all
// whitespace on that side, "+" keeps it). Raw blocks become text here.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja {

struct Token {
    enum class Kind { Text, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };
    Kind kind;
    std::string text;  // Text: the data; Name, Op: itself; String: unescaped; Int, Float: digits
    size_t pos;        // byte offset in the (newline-normalized) source, for messages
};

// The source as jinja2 sees it: \r\n and \r become \n, and one trailing newline is dropped
// (keep_trailing_newline=False).
std::string normalize_source(std::string_view source);

// Throws strata::Error with the line and column of what it cannot read.
std::vector<Token> tokenize(std::string_view source);

// "line L, column C" (1-based) of a byte offset, for error messages.
std::string location(std::string_view source, size_t pos);

}  // namespace strata::jinja
