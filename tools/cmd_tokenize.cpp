// strata tokenize / detokenize: the model's tokenizer from the command line.
#include <charconv>

#include <fmt/format.h>

#include "engine/core/flags.h"
#include "engine/gguf/reader.h"
#include "engine/text/tokenizer.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace strata {

Flags tokenize_flags() {
    return Flags("tokenize", "strata tokenize -m MODEL TEXT",
                 {{"--model", "FILE", "", "GGUF model whose tokenizer to use", "-m"},
                  {"--special", "", "", "turn special-token texts (<|im_start|>) into their tokens"},
                  {"--pieces", "", "", "print each id with its piece"}});
}

Flags detokenize_flags() {
    return Flags("detokenize", "strata detokenize -m MODEL IDS",
                 {{"--model", "FILE", "", "GGUF model whose tokenizer to use", "-m"},
                  {"--special", "", "", "render special tokens as their text"}});
}

int cmd_tokenize(int argc, char** argv) {
    Flags f = tokenize_flags();
    if (!cli::parse(f, argc, argv)) return 0;
    if (!f.given("--model") || f.positional().size() != 1) throw UsageError("tokenize: needs -m MODEL and one TEXT");
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(f.str("--model")));
    const auto ids = tok.encode(f.positional()[0], f.on("--special"));
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (f.on("--pieces")) out += fmt::format("{} '{}'\n", ids[i], tok.token_text(ids[i]));
        else out += fmt::format("{}{}", i ? "," : "", ids[i]);
    }
    fmt::print("{}{}", out, f.on("--pieces") ? "" : "\n");
    return 0;
}

int cmd_detokenize(int argc, char** argv) {
    Flags f = detokenize_flags();
    if (!cli::parse(f, argc, argv)) return 0;
    if (!f.given("--model") || f.positional().size() != 1) throw UsageError("detokenize: needs -m MODEL and IDS (1,2,3)");
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(f.str("--model")));
    std::vector<int32_t> ids;
    const std::string& s = f.positional()[0];
    for (size_t i = 0; i <= s.size();) {
        size_t j = s.find_first_of(", ", i);
        if (j == std::string::npos) j = s.size();
        if (j > i) {
            int32_t v = 0;
            auto [p, ec] = std::from_chars(s.data() + i, s.data() + j, v);
            if (ec != std::errc() || p != s.data() + j) throw UsageError(fmt::format("detokenize: '{}' is not a token id", s.substr(i, j - i)));
            if (v < 0 || v >= tok.n_vocab()) fail("token id {} is out of range (vocabulary has {})", v, tok.n_vocab());
            ids.push_back(v);
        }
        i = j + 1;
    }
    fmt::print("{}\n", tok.decode(ids, f.on("--special")));
    return 0;
}

}  // namespace strata
