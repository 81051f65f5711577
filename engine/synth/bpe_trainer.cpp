#include "engine/synth/bpe_trainer.h"

#include <array>
#include <map>
#include <unordered_map>
#include <utility>

namespace strata::synth {

namespace {

std::string utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

bool printable(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct ByteTables {
    std::array<std::string, 256> to_unicode;
    std::vector<uint8_t> order;
    ByteTables() {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            if (printable(b)) {
                to_unicode[b] = utf8(static_cast<uint32_t>(b));
                order.push_back(static_cast<uint8_t>(b));
            }
        }
        for (int b = 0; b < 256; ++b) {
            if (!printable(b)) {
                to_unicode[b] = utf8(static_cast<uint32_t>(256 + n++));
                order.push_back(static_cast<uint8_t>(b));
            }
        }
    }
};

const ByteTables& tables() {
    static const ByteTables t;
    return t;
}

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_newline(unsigned char c) { return c == '\n' || c == '\r'; }
char lower(unsigned char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : static_cast<char>(c); }

// Length of the piece starting at pos (the procedural form of the Qwen2 regex).
size_t piece_len(std::string_view t, size_t pos) {
    const size_t n = t.size();
    auto at = [&](size_t i) -> int { return i < n ? static_cast<unsigned char>(t[i]) : -1; };
    const int c = at(pos), nx = at(pos + 1);
    if (c == '\'' && nx >= 0) {  // 's 't 'm 'd 're 've 'll
        const char a = lower(static_cast<unsigned char>(nx));
        const int n2 = at(pos + 2);
        const char b = n2 >= 0 ? lower(static_cast<unsigned char>(n2)) : '\0';
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    }
    const auto uc = static_cast<unsigned char>(c);
    if (!is_newline(uc) && !is_digit(uc) && (is_letter(uc) || (nx >= 0 && is_letter(static_cast<unsigned char>(nx))))) {
        size_t e = pos + 1;
        while (e < n && is_letter(static_cast<unsigned char>(t[e]))) ++e;
        return e - pos;
    }
    if (is_digit(uc)) return 1;  // Qwen splits numbers into single digits
    const int c2 = c == ' ' ? nx : c;
    if (c2 >= 0 && !is_space(static_cast<unsigned char>(c2)) && !is_letter(static_cast<unsigned char>(c2)) &&
        !is_digit(static_cast<unsigned char>(c2))) {
        size_t e = pos + (c == ' ' ? 1 : 0);
        auto punct = [&](size_t i) {
            const auto x = static_cast<unsigned char>(t[i]);
            return !is_space(x) && !is_letter(x) && !is_digit(x);
        };
        while (e < n && punct(e)) ++e;
        while (e < n && is_newline(static_cast<unsigned char>(t[e]))) ++e;
        return e - pos;
    }
    size_t e = pos, last_nl = 0;
    while (e < n && is_space(static_cast<unsigned char>(t[e]))) {
        if (is_newline(static_cast<unsigned char>(t[e]))) last_nl = e + 1;
        ++e;
    }
    if (last_nl) return last_nl - pos;
    const size_t run = e - pos;
    if (run > 1 && e < n) return run - 1;  // the last space goes with the next word
    if (run > 0) return run;
    return 1;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return tables().to_unicode[b]; }
const std::vector<uint8_t>& gpt2_byte_order() { return tables().order; }

std::string bytes_to_unicode(std::string_view raw) {
    std::string s;
    for (char c : raw) s += byte_to_unicode(static_cast<uint8_t>(c));
    return s;
}

std::vector<std::string> pretokenize(std::string_view text) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos < text.size();) {
        const size_t len = piece_len(text, pos);
        out.emplace_back(text.substr(pos, len));
        pos += len;
    }
    return out;
}

BpeResult train_bpe(std::string_view corpus, size_t max_new_tokens, int64_t min_count) {
    BpeResult r;
    std::unordered_map<std::string, int> id_of;
    for (uint8_t b : gpt2_byte_order()) {
        id_of[byte_to_unicode(b)] = static_cast<int>(r.tokens.size());
        r.tokens.push_back(byte_to_unicode(b));
    }
    // Distinct words with their counts; std::map keeps the iteration order fixed.
    std::map<std::string, int64_t> freq;
    for (auto& p : pretokenize(corpus)) ++freq[p];
    std::vector<std::pair<std::vector<int>, int64_t>> words;
    for (const auto& [w, n] : freq) {
        std::vector<int> syms;
        for (char ch : w) syms.push_back(id_of.at(byte_to_unicode(static_cast<uint8_t>(ch))));
        words.emplace_back(std::move(syms), n);
    }

    size_t added = 0;
    while (added < max_new_tokens) {
        std::map<std::pair<int, int>, int64_t> pairs;
        for (const auto& [syms, n] : words)
            for (size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += n;
        const std::pair<int, int>* best = nullptr;
        int64_t best_n = 0;
        for (const auto& [p, n] : pairs) {
            if (n < best_n) continue;
            if (n == best_n && best) {
                const auto& [bl, br] = *best;
                const int cmp = r.tokens[p.first].compare(r.tokens[bl]);
                if (cmp > 0 || (cmp == 0 && r.tokens[p.second] >= r.tokens[br])) continue;
            }
            best = &p;
            best_n = n;
        }
        if (!best || best_n < min_count) break;
        const auto [a, b] = *best;
        const std::string merged = r.tokens[a] + r.tokens[b];
        r.merges.push_back(r.tokens[a] + " " + r.tokens[b]);
        int id;
        if (auto it = id_of.find(merged); it != id_of.end()) {
            id = it->second;  // e.g. "a bc" after "ab c": same token, second merge rule
        } else {
            id = static_cast<int>(r.tokens.size());
            id_of[merged] = id;
            r.tokens.push_back(merged);
            ++added;
        }
        for (auto& [syms, n] : words) {
            std::vector<int> out;
            out.reserve(syms.size());
            for (size_t i = 0; i < syms.size(); ++i) {
                if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
                    out.push_back(id);
                    ++i;
                } else {
                    out.push_back(syms[i]);
                }
            }
            syms = std::move(out);
        }
    }
    return r;
}

}  // namespace strata::synth
