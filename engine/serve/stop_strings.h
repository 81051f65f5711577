// Stop strings over streamed text: text that may be the start of a stop string is
// held back until it is known not to be one, so a stop string is never emitted.
#pragma once
#include <string>
#include <vector>

namespace strata {

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);

    // Appends generated text; returns the text that is now safe to emit. After a
    // stop string is found, stopped() is true and the stop text and everything after
    // it are dropped.
    std::string push(const std::string& text);
    // End of generation: what is still held back (it did not become a stop string).
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace strata
