#include "engine/text/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/text/unicode.h"

namespace strata::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Lexer {
public:
    explicit Lexer(std::string_view src) : src_(src) {}

    std::vector<Token> run() {
        while (pos_ < src_.size()) {
            size_t tag = find_tag(pos_);
            if (tag == src_.npos) {
                emit_text(src_.substr(pos_), pos_);
                break;
            }
            char kind = src_[tag + 1];
            char mod = tag + 2 < src_.size() ? src_[tag + 2] : 0;
            emit_text(strip_before(src_.substr(pos_, tag - pos_), pos_, kind, mod), pos_);
            if (kind == '#') {
                comment(tag, mod);
            } else if (kind == '%' && raw_block(tag)) {
                continue;
            } else {
                tag_tokens(tag, kind, mod);
            }
        }
        out_.push_back({Token::Kind::Eof, "", src_.size()});
        return std::move(out_);
    }

private:
    [[noreturn]] void error(size_t at, std::string_view what) {
        fail("jinja: syntax error at {}: {}", location(src_, at), what);
    }

    size_t find_tag(size_t from) const {
        for (size_t p = src_.find('{', from); p != src_.npos && p + 1 < src_.size(); p = src_.find('{', p + 1)) {
            char c = src_[p + 1];
            if (c == '{' || c == '%' || c == '#') return p;
        }
        return src_.npos;
    }

    void emit_text(std::string_view text, size_t at) {
        if (!text.empty()) out_.push_back({Token::Kind::Text, std::string(text), at});
    }

    // The data before a tag, less what the tag's modifier or lstrip_blocks removes.
    std::string_view strip_before(std::string_view data, size_t data_start, char kind, char mod) const {
        if (mod == '-') {
            while (!data.empty() && is_space(data.back())) data.remove_suffix(1);
            return data;
        }
        if (mod == '+' || kind == '{') return data;  // lstrip_blocks: block and comment tags only
        size_t line = data.rfind('\n');
        line = line == data.npos ? 0 : line + 1;
        bool line_starting = data_start == 0 || src_[data_start - 1] == '\n';
        bool blank = data.find_first_not_of(" \t", line) == data.npos;
        return (line > 0 || line_starting) && blank ? data.substr(0, line) : data;
    }

    // Moves past a tag's end marker at `end` (length `len`): "-" strips all whitespace
    // after it; trim_blocks drops one newline after a block or comment tag.
    void finish_tag(size_t end, size_t len, char mod, bool trims) {
        pos_ = end + len;
        if (mod == '-') {
            while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
        } else if (trims && mod != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
        }
    }

    void comment(size_t tag, char mod) {
        size_t body = tag + 2 + (mod == '-' || mod == '+');
        size_t end = src_.find("#}", body);
        if (end == src_.npos) error(tag, "unterminated comment");
        char end_mod = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
        finish_tag(end, 2, end_mod, true);
    }

    // `{% raw %}...{% endraw %}` at `tag`: its content is text. False when not a raw tag.
    bool raw_block(size_t tag) {
        size_t after = match_block_word(tag, "raw");
        if (after == src_.npos) return false;
        char open_mod = src_[after - 3] == '-' ? '-' : 0;  // no trim_blocks after "raw"
        finish_tag(after - 2, 2, open_mod, false);
        for (size_t p = find_tag(pos_); p != src_.npos; p = find_tag(p + 2)) {
            size_t end = match_block_word(p, "endraw");
            if (end == src_.npos) continue;
            char end_mod = p + 2 < src_.size() ? src_[p + 2] : 0;
            emit_text(strip_before(src_.substr(pos_, p - pos_), pos_, '%', end_mod), pos_);
            char close_mod = src_[end - 3] == '-' || src_[end - 3] == '+' ? src_[end - 3] : 0;
            finish_tag(end - 2, 2, close_mod, true);
            return true;
        }
        error(tag, "raw block without endraw");
    }

    // If `{%[-+]? word [-+]?%}` starts at p, the offset just past its "%}"; else npos.
    size_t match_block_word(size_t p, std::string_view word) const {
        if (src_.compare(p, 2, "{%") != 0) return src_.npos;
        p += 2;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (src_.compare(p, word.size(), word) != 0) return src_.npos;
        p += word.size();
        if (p < src_.size() && is_name_char(src_[p])) return src_.npos;
        while (p < src_.size() && is_space(src_[p])) ++p;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
        return src_.compare(p, 2, "%}") == 0 ? p + 2 : src_.npos;
    }

    void tag_tokens(size_t tag, char kind, char mod) {
        bool block = kind == '%';
        out_.push_back({block ? Token::Kind::BlockBegin : Token::Kind::VarBegin, "", tag});
        size_t p = tag + 2 + (mod == '-' || (block && mod == '+'));
        int depth = 0;  // brackets open: an end marker inside them is not one (as jinja2)
        for (;;) {
            while (p < src_.size() && is_space(src_[p])) ++p;
            if (p >= src_.size()) error(tag, block ? "unterminated '{%' tag" : "unterminated '{{' tag");
            if (depth == 0) {
                std::string_view close = block ? "%}" : "}}";
                char end_mod = src_[p];
                bool has_mod = end_mod == '-' || (block && end_mod == '+');
                if (src_.compare(p + has_mod, 2, close) == 0) {
                    out_.push_back({block ? Token::Kind::BlockEnd : Token::Kind::VarEnd, "", p});
                    finish_tag(p + has_mod, 2, has_mod ? end_mod : 0, block);
                    return;
                }
            }
            p = token(p, depth);
        }
    }

    // One expression token at p; returns the offset after it.
    size_t token(size_t p, int& depth) {
        char c = src_[p];
        if (is_name_start(c)) {
            size_t e = p;
            while (e < src_.size() && is_name_char(src_[e])) ++e;
            out_.push_back({Token::Kind::Name, std::string(src_.substr(p, e - p)), p});
            return e;
        }
        if (is_digit(c)) return number(p);
        if (c == '\'' || c == '"') return string(p);
        static constexpr std::string_view two[] = {"//", "**", "==", "!=", "<=", ">="};
        for (auto op : two) {
            if (src_.compare(p, 2, op) == 0) {
                out_.push_back({Token::Kind::Op, std::string(op), p});
                return p + 2;
            }
        }
        if (std::strchr("+-*/%~()[]{},.:|=<>", c) == nullptr) {
            error(p, fmt::format("unexpected character '{}'", c));
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        out_.push_back({Token::Kind::Op, std::string(1, c), p});
        return p + 1;
    }

    size_t digits(size_t p) const {
        while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
        return p;
    }

    size_t number(size_t p) {
        size_t e = digits(p);
        bool is_float = false;
        if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
            e = digits(e + 1);
            is_float = true;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
            size_t x = e + 1 + (e + 1 < src_.size() && (src_[e + 1] == '+' || src_[e + 1] == '-'));
            if (x < src_.size() && is_digit(src_[x])) {
                e = digits(x);
                is_float = true;
            }
        }
        std::string text(src_.substr(p, e - p));
        std::erase(text, '_');
        out_.push_back({is_float ? Token::Kind::Float : Token::Kind::Int, std::move(text), p});
        return e;
    }

    // A quoted string, unescaped as Python's unicode_escape does (which is what jinja2 uses).
    size_t string(size_t p) {
        char quote = src_[p];
        std::string out;
        size_t i = p + 1;
        for (; i < src_.size() && src_[i] != quote; ++i) {
            if (src_[i] != '\\') {
                out += src_[i];
            } else if (++i < src_.size()) {
                i = escape(i, out);
            }
        }
        if (i >= src_.size()) error(p, "unterminated string");
        out_.push_back({Token::Kind::String, std::move(out), p});
        return i + 1;
    }

    // The escape whose letter is at i; returns the offset of its last character.
    size_t escape(size_t i, std::string& out) {
        char c = src_[i];
        static constexpr std::string_view from = "nrtabfv\\'\"", to = "\n\r\t\a\b\f\v\\'\"";
        if (size_t k = from.find(c); k != from.npos) {
            out += to[k];
            return i;
        }
        if (c == '\n') return i;  // line continuation
        if (c >= '0' && c <= '7') {
            uint32_t v = 0;
            size_t e = i;
            for (; e < src_.size() && e < i + 3 && src_[e] >= '0' && src_[e] <= '7'; ++e) v = v * 8 + (src_[e] - '0');
            text::append_utf8(out, v);
            return e - 1;
        }
        size_t n = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (n == 0) {  // not an escape: kept as written
            out += '\\';
            out += c;
            return i;
        }
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
            int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) error(i - 1, "truncated \\x, \\u or \\U escape");
            v = v * 16 + h;
        }
        if (v > 0x10FFFF) error(i - 1, "escape beyond U+10FFFF");
        text::append_utf8(out, v);
        return i + n;
    }

    std::string_view src_;
    size_t pos_ = 0;
    std::vector<Token> out_;
};

}  // namespace

std::string normalize_source(std::string_view source) {
    std::string s;
    s.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] != '\r') {
            s += source[i];
        } else {
            s += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        }
    }
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
}

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string location(std::string_view source, size_t pos) {
    pos = std::min(pos, source.size());
    size_t line = 1 + std::count(source.begin(), source.begin() + pos, '\n');
    size_t newline = pos == 0 ? source.npos : source.rfind('\n', pos - 1);
    size_t bol = newline == source.npos ? 0 : newline + 1;
    return fmt::format("line {}, column {}", line, pos - bol + 1);
}

}  // namespace strata::jinja
