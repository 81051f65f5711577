#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/pretokenizer.h"

#include <pcre2.h>

#include <array>

#include "engine/core/error.h"

namespace strata::text {

struct Regex::Code {
    pcre2_code* code = nullptr;
    ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern) : code_(std::make_unique<Code>()) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // MATCH_INVALID_UTF: arbitrary bytes are allowed in subjects (invalid sequences
    // simply never match) instead of every match failing on the first bad byte.
    code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off,
                                nullptr);
    if (!code_->code) {
        std::array<PCRE2_UCHAR, 256> msg{};
        pcre2_get_error_message(err, msg.data(), msg.size());
        fail("pre-tokenizer regex does not compile at offset {}: {} (pattern {})", err_off,
             reinterpret_cast<const char*>(msg.data()), pattern);
    }
    jit_ = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

void Regex::split(std::string_view text, std::vector<std::string_view>& out) const {
    struct MatchData {
        pcre2_match_data* md;
        ~MatchData() { pcre2_match_data_free(md); }
    } m{pcre2_match_data_create_from_pattern(code_->code, nullptr)};
    if (!m.md) fail("pre-tokenizer: out of memory for PCRE2 match data");

    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, covered = 0;
    while (pos < text.size()) {
        int rc = pcre2_match(code_->code, subject, text.size(), pos, 0, m.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            std::array<PCRE2_UCHAR, 256> msg{};
            pcre2_get_error_message(rc, msg.data(), msg.size());
            fail("pre-tokenizer: PCRE2 match failed: {}", reinterpret_cast<const char*>(msg.data()));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
        size_t b = ov[0], e = ov[1];
        if (b > covered) out.push_back(text.substr(covered, b - covered));
        if (e > b) out.push_back(text.substr(b, e - b));
        covered = e;
        // None of our patterns matches empty, but never loop on an empty match.
        pos = e > b ? e : b + 1;
    }
    if (covered < text.size()) out.push_back(text.substr(covered));
}

namespace {

// llama.cpp's spelling of the contraction group: case-insensitive without (?i).
constexpr const char* kContractions = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

}  // namespace

const std::string& pre_tokenizer_pattern(PreType type) {
    static const std::string gpt2 =
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    static const std::string qwen2 = std::string(kContractions) +
        "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)|\\s+";
    static const std::string qwen35 = std::string(kContractions) +
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
        "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const std::string llama3 = std::string(kContractions) +
        "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)|\\s+";
    switch (type) {
        case PreType::Qwen2: return qwen2;
        case PreType::Qwen35: return qwen35;
        case PreType::LlamaBpe: return llama3;
        case PreType::Gpt2: break;
    }
    return gpt2;
}

PreTokenizerInfo pre_tokenizer_for(std::string_view pre) {
    if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez")
        return {PreType::Qwen2, true, false};
    if (pre == "qwen35") return {PreType::Qwen35, true, false};
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "falcon3")
        return {PreType::LlamaBpe, true, true};
    if (pre == "gpt2" || pre == "gpt-2") return {PreType::Gpt2, true, false};
    return {PreType::Gpt2, false, false};
}

}  // namespace strata::text
