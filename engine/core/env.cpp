#include "engine/core/env.h"

#include <charconv>
#include <cstdlib>

#include "engine/core/error.h"

namespace strata {

const char* process_env(const char* name) { return std::getenv(name); }

int64_t EnvReader::integer(const char* name, int64_t def, int64_t lo, int64_t hi) const {
    const char* v = lookup_(name);
    if (!v) return def;
    const std::string s = v;
    int64_t x = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || x < lo || x > hi)
        fail("environment variable {}='{}' must be an integer in {}..{}", name, s, lo, hi);
    return x;
}

bool EnvReader::flag(const char* name, bool def) const { return integer(name, def ? 1 : 0, 0, 1) == 1; }

double EnvReader::number(const char* name, double def, double lo, double hi) const {
    const char* v = lookup_(name);
    if (!v) return def;
    const std::string s = v;
    char* end = nullptr;
    const double x = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !(x >= lo && x <= hi))
        fail("environment variable {}='{}' must be a number in {}..{}", name, s, lo, hi);
    return x;
}

std::string env_markdown(std::span<const EnvSpec> specs) {
    std::string out = "## Environment variables\n\n| variable | default | meaning |\n|---|---|---|\n";
    for (const auto& s : specs) out += fmt::format("| `{}` | `{}` | {} |\n", s.name, s.def, s.doc);
    return out;
}

}  // namespace strata
