#include "server/reasoning.h"

#include <algorithm>

namespace strata::server {

namespace {
constexpr std::string_view kOpen = "<think>", kClose = "</think>";

// Length of the longest suffix of s that is a proper prefix of tag.
size_t partial_tag(const std::string& s, std::string_view tag) {
    for (size_t n = std::min(tag.size() - 1, s.size()); n > 0; --n)
        if (s.compare(s.size() - n, n, tag.data(), n) == 0) return n;
    return 0;
}
}  // namespace

ReasoningSplitter::ReasoningSplitter(bool enabled, bool inside)
    : state_(!enabled ? State::Content : inside ? State::Think : State::Start), strip_ws_(inside) {}

ReasoningSplitter::Out ReasoningSplitter::push(const std::string& text) {
    held_ += text;
    return step(false);
}

ReasoningSplitter::Out ReasoningSplitter::flush() { return step(true); }

ReasoningSplitter::Out ReasoningSplitter::step(bool final) {
    Out out;
    for (;;) {
        if (strip_ws_) {
            const size_t n = held_.find_first_not_of(" \n\r\t");
            held_.erase(0, n == std::string::npos ? held_.size() : n);
            if (held_.empty()) return out;
            strip_ws_ = false;
        }
        switch (state_) {
            case State::Start: {  // does the answer open with <think>?
                const size_t ws = held_.find_first_not_of(" \n\r\t");
                if (ws == std::string::npos && !final) return out;
                const std::string rest = ws == std::string::npos ? "" : held_.substr(ws);
                if (rest.compare(0, kOpen.size(), kOpen) == 0) {
                    held_ = rest.substr(kOpen.size());
                    state_ = State::Think;
                    strip_ws_ = true;
                    continue;
                }
                if (!final && rest.size() < kOpen.size() && kOpen.compare(0, rest.size(), rest) == 0) return out;
                state_ = State::Content;
                continue;
            }
            case State::Think: {
                const size_t end = held_.find(kClose);
                if (end != std::string::npos) {
                    out.reasoning += held_.substr(0, end);
                    held_.erase(0, end + kClose.size());
                    state_ = State::Content;
                    strip_ws_ = true;
                    continue;
                }
                const size_t keep = final ? 0 : partial_tag(held_, kClose);
                out.reasoning += held_.substr(0, held_.size() - keep);
                held_.erase(0, held_.size() - keep);
                return out;
            }
            case State::Content:
                out.content += held_;
                held_.clear();
                return out;
        }
    }
}

}  // namespace strata::server
