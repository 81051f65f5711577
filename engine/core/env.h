// STRATA_* environment variables: the mechanism. Each layer that reads some declares them
// beside the options they set (name, default: the option's own, written once there, and
// a one-line doc) and parses them through an EnvReader; engine/env_vars.cpp gathers every
// layer's declarations into the one list `strata flags-doc` prints. process_env() is the
// only call to getenv.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <fmt/format.h>

namespace strata {

struct EnvSpec {
    std::string name;
    std::string def;
    std::string doc;
};

using EnvLookup = std::function<const char*(const char*)>;

const char* process_env(const char* name);  // the process environment (getenv)

// Typed reads of variables, from the process environment or a lookup a test passes. An
// unset variable gives the default; a malformed or out-of-range value is a strata::Error
// naming the variable.
class EnvReader {
public:
    explicit EnvReader(EnvLookup lookup = process_env) : lookup_(std::move(lookup)) {}
    bool flag(const char* name, bool def) const;  // 0 or 1
    int64_t integer(const char* name, int64_t def, int64_t lo, int64_t hi) const;
    double number(const char* name, double def, double lo, double hi) const;

private:
    EnvLookup lookup_;
};

// A default as the table shows it (flags as 0 / 1).
inline std::string env_default(bool v) { return v ? "1" : "0"; }
template <typename T>
std::string env_default(T v) {
    return fmt::format("{}", v);
}

std::string env_markdown(std::span<const EnvSpec> specs);

}  // namespace strata
