#include "engine/text/jinja/lstr.h"

#include <algorithm>

namespace strata::jinja {

LStr LStr::from_data(std::string t) {
    LStr s(std::move(t));
    if (!s.text.empty()) s.literal.push_back({0, s.text.size()});
    return s;
}

void LStr::append(std::string_view plain) { text.append(plain); }

void LStr::append(const LStr& s) {
    size_t shift = text.size();
    text.append(s.text);
    for (auto [b, e] : s.literal) {
        if (!literal.empty() && literal.back().second == b + shift) {
            literal.back().second = e + shift;  // keep ranges maximal
        } else {
            literal.push_back({b + shift, e + shift});
        }
    }
}

LStr LStr::substr(size_t pos, size_t n) const {
    pos = std::min(pos, text.size());
    n = std::min(n, text.size() - pos);
    LStr out(text.substr(pos, n));
    for (auto [b, e] : literal) {
        size_t lo = std::max(b, pos), hi = std::min(e, pos + n);
        if (lo < hi) out.literal.push_back({lo - pos, hi - pos});
    }
    return out;
}

LStr LStr::derived(std::string result) const {
    return any_literal() ? from_data(std::move(result)) : LStr(std::move(result));
}

LStr LStr::same_shape(std::string result) const {
    LStr out(std::move(result));
    out.literal = literal;
    return out;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
    std::vector<size_t> off;
    off.reserve(s.size() + 1);
    for (size_t i = 0; i < s.size(); ++i) {
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) off.push_back(i);
    }
    off.push_back(s.size());
    return off;
}

size_t code_point_count(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

}  // namespace strata::jinja
