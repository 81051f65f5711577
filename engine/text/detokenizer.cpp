#include "engine/text/detokenizer.h"

#include "engine/text/tokenizer.h"
#include "engine/text/unicode.h"

namespace strata {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool render_special)
    : tok_(&tok), render_special_(render_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
    std::string_view p = tok_->piece(id, render_special_);
    if (p.empty()) return {};
    if (at_start_) {
        at_start_ = false;
        if (tok_->strips_leading_space() && p[0] == ' ') p.remove_prefix(1);
    }
    pending_.append(p);
    size_t hold = text::utf8_incomplete_tail(pending_);
    std::string ready = text::sanitize_utf8(std::string_view(pending_).substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    return ready;
}

std::string StreamingDetokenizer::flush() {
    std::string rest = text::sanitize_utf8(pending_);
    pending_.clear();
    return rest;
}

void StreamingDetokenizer::reset() {
    pending_.clear();
    at_start_ = true;
}

}  // namespace strata
