// Text <-> token ids for the two vocabulary kinds found in our GGUFs (MODEL_SPEC 7):
// byte-level BPE (tokenizer.ggml.model = "gpt2": Qwen2/3/3-Next, Llama 3, GPT-2) and
// SentencePiece (model = "llama": Llama 1/2, Mistral v0.1). Matches llama.cpp's
// tokenization except where docs/tokenizer.md says otherwise.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

class GgufFile;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
    Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// The tokenizer section of a GGUF as plain data (tests build this directly).
struct TokenizerVocab {
    std::string model = "gpt2";        // "gpt2" byte-level BPE, "llama" SentencePiece
    std::string pre = "gpt2";          // BPE pre-tokenizer name (tokenizer.ggml.pre)
    std::vector<std::string> tokens;   // index = id
    std::vector<int32_t> types;        // TokenType per id; empty = all Normal
    std::vector<float> scores;         // SentencePiece merge scores; empty = all 0
    std::vector<std::string> merges;   // BPE "left right"; rank = index
    int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;  // -1: none
    std::optional<bool> add_bos;       // absent: the model's default (see add_bos())
    bool add_space_prefix = true;      // SentencePiece: prepend ▁ to the text
    std::string chat_template;         // tokenizer.chat_template (Jinja source)
};

class Tokenizer {
public:
    static Tokenizer from_gguf(const GgufFile& file);
    static Tokenizer from_vocab(TokenizerVocab vocab);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Text to ids, without BOS (prepend bos() yourself when add_bos()). With
    // parse_special, texts of CONTROL and USER_DEFINED tokens (<|im_start|>, <think>)
    // become those tokens: use it only for trusted text such as a rendered chat
    // template. Otherwise they are encoded as ordinary text. Any bytes are accepted;
    // invalid UTF-8 is encoded through byte tokens.
    std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
    // The same, but inside the literal byte ranges [first, second) (sorted, disjoint)
    // special-token texts stay ordinary text: a rendered chat prompt whose message
    // contents must not forge the template's markers.
    std::vector<int32_t> encode(std::string_view text, bool parse_special,
                                std::span<const std::pair<size_t, size_t>> literal) const;

    // Ids to bytes (not necessarily valid UTF-8 when ids split a character). CONTROL
    // and UNUSED tokens produce nothing unless render_special.
    std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
    // The bytes one token decodes to (SentencePiece: ▁ already turned into a space).
    std::string_view piece(int32_t id, bool render_special = false) const;
    // SentencePiece with add_space_prefix: decoding drops one leading space.
    bool strips_leading_space() const;

    const std::string& token_text(int32_t id) const;  // as stored in the vocabulary
    TokenType token_type(int32_t id) const;
    std::optional<int32_t> find_token(std::string_view text) const;

    int32_t n_vocab() const;
    int32_t bos() const;
    int32_t eos() const;
    // tokenizer.ggml.add_bos_token; default true for SentencePiece and llama-bpe,
    // false otherwise (Qwen never wants BOS).
    bool add_bos() const;
    // End of generation: eos, eot, eom and tokens named like <|im_end|>, <|eot_id|>,
    // <|endoftext|>, </s>, <end_of_turn> ...
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;

    const std::string& model() const;
    const std::string& pre() const;
    // False when tokenizer.ggml.pre was unknown and the gpt2 regex is used instead.
    bool pre_recognized() const;
    const std::string& chat_template() const;

    struct Impl;

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace strata
