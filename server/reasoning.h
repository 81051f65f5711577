// Qwen-style reasoning: with a thinking chat template the model writes
// "<think>\n...\n</think>\n\n" before its answer (or starts inside the block when the
// template opened it). This splits streamed text into reasoning and content, holding
// back text that may be the start of a tag.
#pragma once
#include <string>

namespace strata::server {

class ReasoningSplitter {
public:
    // enabled: the template uses thinking; inside: the prompt already opened <think>.
    ReasoningSplitter(bool enabled, bool inside);

    struct Out {
        std::string reasoning, content;
    };
    Out push(const std::string& text);
    Out flush();  // end of stream: what is held back goes where it was heading

private:
    enum class State { Start, Think, Content };
    Out step(bool final);
    State state_;
    bool strip_ws_ = false;  // drop whitespace right after a tag
    std::string held_;
};

}  // namespace strata::server
