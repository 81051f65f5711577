#include "engine/text/tokenizer.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"
#include "engine/text/tokenizer_impl.h"
#include "engine/text/unicode.h"

namespace strata {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // ▁ U+2581

// Texts that end generation in the models we know (llama.cpp keeps the same list).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>", "<|end|>",
    "<end_of_turn>", "<|return|>", "<|call|>", "</s>",
};

std::string byte_level_to_bytes(std::string_view s) {
    std::string out;
    for (size_t pos = 0; pos < s.size();) {
        size_t n = text::utf8_valid_len(s, pos);
        if (n == 0) {  // not UTF-8 at all: keep the byte
            out += s[pos++];
            continue;
        }
        uint32_t cp = text::utf8_decode(s, pos, n);
        int b = text::codepoint_to_byte(cp);
        if (b >= 0) out += static_cast<char>(b);
        else out.append(s.substr(pos, n));  // outside the alphabet: keep as text
        pos += n;
    }
    return out;
}

std::string spm_to_bytes(std::string_view s) {
    std::string out;
    for (size_t pos = 0; pos < s.size();) {
        if (s.substr(pos, kSpmSpace.size()) == kSpmSpace) {
            out += ' ';
            pos += kSpmSpace.size();
        } else {
            out += s[pos++];
        }
    }
    return out;
}

// "<0x41>" -> 0x41; -1 when s is not of that form.
int parse_byte_token(std::string_view s) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
    auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    int hi = hex(s[3]), lo = hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void build(Tokenizer::Impl& m) {
    auto& v = m.v;
    const auto n = static_cast<int32_t>(v.tokens.size());
    STRATA_CHECK(n > 0, "tokenizer has no tokens");
    STRATA_CHECK(v.types.empty() || v.types.size() == v.tokens.size(),
                 "token_type has {} entries for {} tokens", v.types.size(), v.tokens.size());
    STRATA_CHECK(v.scores.empty() || v.scores.size() == v.tokens.size(),
                 "scores has {} entries for {} tokens", v.scores.size(), v.tokens.size());
    for (int32_t* id : {&v.bos, &v.eos, &v.eot, &v.eom, &v.unk, &v.pad})
        STRATA_CHECK(*id >= -1 && *id < n, "special token id {} out of range [0, {})", *id, n);

    if (v.model == "llama") m.is_spm = true;
    else if (v.model != "gpt2")
        fail("unsupported tokenizer model '{}' (supported: gpt2 byte-level BPE, llama "
             "SentencePiece)", v.model);

    m.token_to_id.reserve(v.tokens.size());
    m.pieces.resize(v.tokens.size());
    for (int32_t id = 0; id < n; ++id) {
        const std::string& t = v.tokens[id];
        m.token_to_id.emplace(t, id);  // first id wins for duplicates, as in llama.cpp
        TokenType ty = m.type(id);
        if (ty == TokenType::Control || ty == TokenType::UserDefined) m.pieces[id] = t;
        else if (m.is_spm && ty == TokenType::Byte && parse_byte_token(t) >= 0)
            m.pieces[id] = std::string(1, static_cast<char>(parse_byte_token(t)));
        else m.pieces[id] = m.is_spm ? spm_to_bytes(t) : byte_level_to_bytes(t);
    }

    m.byte_token.fill(-1);
    for (int b = 0; b < 256; ++b) {
        if (m.is_spm) {
            m.byte_token[b] = m.lookup(fmt::format("<0x{:02X}>", b));
        } else {
            std::string ch;
            text::append_utf8(ch, text::byte_to_codepoint(static_cast<uint8_t>(b)));
            m.byte_token[b] = m.lookup(ch);
        }
    }

    if (!m.is_spm) {
        m.pre_info = text::pre_tokenizer_for(v.pre);
        m.regex.emplace(text::pre_tokenizer_pattern(m.pre_info.type));
        m.merges.reserve(v.merges.size());
        for (size_t rank = 0; rank < v.merges.size(); ++rank) {
            std::string_view s = v.merges[rank];
            size_t sp = s.find(' ', 1);
            STRATA_CHECK(sp != std::string_view::npos, "merge {} '{}' has no space", rank, s);
            int32_t l = m.lookup(s.substr(0, sp)), r = m.lookup(s.substr(sp + 1));
            std::string joined = std::string(s.substr(0, sp)) + std::string(s.substr(sp + 1));
            int32_t res = m.lookup(joined);
            // A merge whose parts or result are not tokens can never produce a token.
            if (l < 0 || r < 0 || res < 0) continue;
            uint64_t key = (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r);
            m.merges.try_emplace(key, Tokenizer::Impl::Merge{static_cast<int32_t>(rank), res});
        }
    }

    std::vector<int32_t> specials;
    for (int32_t id = 0; id < n; ++id) {
        TokenType ty = m.type(id);
        if ((ty == TokenType::Control || ty == TokenType::UserDefined) && !v.tokens[id].empty())
            specials.push_back(id);
    }
    std::stable_sort(specials.begin(), specials.end(), [&](int32_t a, int32_t b) {
        return v.tokens[a].size() > v.tokens[b].size();
    });
    for (int32_t id : specials)
        m.specials_by_first_byte[static_cast<uint8_t>(v.tokens[id][0])].push_back(id);

    m.eog.assign(v.tokens.size(), 0);
    for (int32_t id : {v.eos, v.eot, v.eom})
        if (id >= 0) m.eog[id] = 1;
    for (int32_t id = 0; id < n; ++id) {
        if (m.type(id) == TokenType::Normal) continue;
        for (auto t : kEogTexts)
            if (v.tokens[id] == t) m.eog[id] = 1;
    }
    for (int32_t id = 0; id < n; ++id)
        if (m.eog[id]) m.eog_list.push_back(id);

    m.add_bos = v.add_bos.value_or(m.is_spm || m.pre_info.type == text::PreType::LlamaBpe);
}

int32_t get_id(const GgufFile& f, std::string_view key) {
    return static_cast<int32_t>(f.get_int(key, -1));
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_vocab(TokenizerVocab vocab) {
    auto impl = std::make_unique<Impl>();
    impl->v = std::move(vocab);
    build(*impl);
    return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
    TokenizerVocab v;
    v.model = f.get_string("tokenizer.ggml.model");
    v.pre = f.get_string("tokenizer.ggml.pre", "gpt2");
    v.tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (f.has("tokenizer.ggml.token_type")) {
        for (int64_t t : f.get_int_array("tokenizer.ggml.token_type")) {
            STRATA_CHECK(t >= 0 && t <= 6, "{}: token type {} is not 0..6", f.path(), t);
            v.types.push_back(static_cast<int32_t>(t));
        }
    }
    if (f.has("tokenizer.ggml.scores")) v.scores = f.get_float_array("tokenizer.ggml.scores");
    if (f.has("tokenizer.ggml.merges")) v.merges = f.get_string_array("tokenizer.ggml.merges");
    v.bos = get_id(f, "tokenizer.ggml.bos_token_id");
    v.eos = get_id(f, "tokenizer.ggml.eos_token_id");
    v.eot = get_id(f, "tokenizer.ggml.eot_token_id");
    v.eom = get_id(f, "tokenizer.ggml.eom_token_id");
    v.unk = get_id(f, "tokenizer.ggml.unknown_token_id");
    v.pad = get_id(f, "tokenizer.ggml.padding_token_id");
    if (f.has("tokenizer.ggml.add_bos_token")) v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
    v.chat_template = f.get_string("tokenizer.chat_template", "");
    try {
        return from_vocab(std::move(v));
    } catch (const Error& e) {
        fail("{}: {}", f.path(), e.what());
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    return encode(text, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       std::span<const std::pair<size_t, size_t>> literal) const {
    const Impl& m = *impl_;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    // SentencePiece prefixes ▁ to a text fragment at the start or after a special token.
    bool after_special = true;
    auto raw = [&](std::string_view frag) {
        if (frag.empty()) return;
        if (!m.is_spm) {
            m.encode_bpe(frag, out);
            return;
        }
        std::string s;
        if (m.v.add_space_prefix && after_special) s += ' ';
        s.append(frag);
        m.encode_spm(s, out);
        after_special = false;
    };
    if (!parse_special) {
        raw(text);
        return out;
    }
    size_t start = 0, span = 0;
    for (size_t pos = 0; pos < text.size();) {
        while (span < literal.size() && literal[span].second <= pos) ++span;
        int32_t hit = -1;
        for (int32_t id : m.specials_by_first_byte[static_cast<uint8_t>(text[pos])]) {
            if (text.substr(pos).starts_with(m.v.tokens[id])) {
                hit = id;
                break;
            }
        }
        // A match that touches a literal range is text.
        if (hit >= 0 && span < literal.size() && literal[span].first < pos + m.v.tokens[hit].size()) hit = -1;
        if (hit < 0) {
            ++pos;
            continue;
        }
        raw(text.substr(start, pos - start));
        out.push_back(hit);
        after_special = true;
        pos += m.v.tokens[hit].size();
        start = pos;
    }
    raw(text.substr(start));
    return out;
}

std::string_view Tokenizer::piece(int32_t id, bool render_special) const {
    if (id < 0 || id >= n_vocab()) return {};
    TokenType ty = impl_->type(id);
    if (!render_special && (ty == TokenType::Control || ty == TokenType::Unused)) return {};
    return impl_->pieces[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
    std::string out;
    for (int32_t id : ids) out.append(piece(id, render_special));
    if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
}

bool Tokenizer::strips_leading_space() const { return impl_->is_spm && impl_->v.add_space_prefix; }

const std::string& Tokenizer::token_text(int32_t id) const {
    STRATA_CHECK(id >= 0 && id < n_vocab(), "token id {} out of range [0, {})", id, n_vocab());
    return impl_->v.tokens[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
    STRATA_CHECK(id >= 0 && id < n_vocab(), "token id {} out of range [0, {})", id, n_vocab());
    return impl_->type(id);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
    int32_t id = impl_->lookup(text);
    return id < 0 ? std::nullopt : std::optional<int32_t>(id);
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->v.tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->v.bos; }
int32_t Tokenizer::eos() const { return impl_->v.eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->eog[id]; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog_list; }
const std::string& Tokenizer::model() const { return impl_->v.model; }
const std::string& Tokenizer::pre() const { return impl_->v.pre; }
bool Tokenizer::pre_recognized() const { return impl_->is_spm || impl_->pre_info.recognized; }
const std::string& Tokenizer::chat_template() const { return impl_->v.chat_template; }

}  // namespace strata
