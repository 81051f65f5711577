// Errors: library code throws strata::Error; the CLI and the server catch it at
// one boundary. A failed check names the condition, the place and the values.
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace strata {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace strata

// STRATA_CHECK(cond, "fmt", args...): throws strata::Error naming the condition,
// file and line plus the formatted message (which should give the wrong values).
#define STRATA_CHECK(cond, ...)                                                        \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            throw ::strata::Error(::fmt::format("{} ({}:{}: check '{}' failed)",       \
                                                ::fmt::format(__VA_ARGS__), __FILE__, \
                                                __LINE__, #cond));                     \
        }                                                                              \
    } while (0)
