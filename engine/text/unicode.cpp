#include "engine/text/unicode.h"

#include <array>

namespace strata::text {
namespace {

struct ByteTables {
    std::array<uint32_t, 256> to_cp{};
    std::array<int16_t, 324> to_byte{};  // code points < 0x144 are the whole alphabet
    ByteTables() {
        to_byte.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
            to_byte[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) {
    return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::string bytes_to_byte_level(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(out, byte_to_codepoint(b));
    return out;
}

namespace {

// Expected sequence length from the lead byte, and the allowed range of the second
// byte (this is where overlongs, surrogates and too-large values are excluded).
struct Lead {
    size_t len;
    uint8_t lo, hi;
};

Lead lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Number of bytes from pos that are consistent with a valid sequence (may be < len).
size_t valid_prefix(std::string_view s, size_t pos, const Lead& l) {
    size_t i = 1;
    for (; i < l.len && pos + i < s.size(); ++i) {
        auto c = static_cast<uint8_t>(s[pos + i]);
        bool ok = i == 1 ? (c >= l.lo && c <= l.hi) : (c >= 0x80 && c <= 0xBF);
        if (!ok) break;
    }
    return i;
}

}  // namespace

size_t utf8_valid_len(std::string_view s, size_t pos) {
    if (pos >= s.size()) return 0;
    Lead l = lead_info(static_cast<uint8_t>(s[pos]));
    if (l.len == 0) return 0;
    return valid_prefix(s, pos, l) == l.len ? l.len : 0;
}

uint32_t utf8_decode(std::string_view s, size_t pos, size_t n) {
    auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[pos + i])); };
    switch (n) {
        case 1: return b(0);
        case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        default:
            return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) |
                   (b(3) & 0x3F);
    }
}

size_t utf8_incomplete_tail(std::string_view s) {
    // A cut-short sequence starts at most 3 bytes before the end.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        size_t pos = s.size() - back;
        Lead l = lead_info(static_cast<uint8_t>(s[pos]));
        if (l.len == 0) continue;  // a continuation byte (or invalid): look further back
        return (l.len > back && valid_prefix(s, pos, l) == back) ? back : 0;
    }
    return 0;
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        size_t n = utf8_valid_len(s, pos);
        if (n > 0) {
            out.append(s.substr(pos, n));
            pos += n;
            continue;
        }
        // One U+FFFD per maximal prefix of a valid sequence (Unicode's "substitution
        // of maximal subparts"), or per single byte that cannot start one.
        Lead l = lead_info(static_cast<uint8_t>(s[pos]));
        pos += l.len == 0 ? 1 : valid_prefix(s, pos, l);
        out.append(kReplacementChar);
    }
    return out;
}

}  // namespace strata::text
