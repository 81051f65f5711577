#include "engine/core/flags.h"

#include <charconv>

#include <fmt/format.h>

namespace strata {

Flags::Flags(std::string command, std::string usage, std::vector<FlagSpec> specs)
    : command_(std::move(command)), usage_(std::move(usage)), specs_(std::move(specs)) {
    for (const auto& s : specs_)
        STRATA_CHECK(s.name.rfind("--", 0) == 0, "flag '{}' must start with --", s.name);
}

const FlagSpec& Flags::spec(std::string_view name) const {
    for (const auto& s : specs_)
        if (s.name == name) return s;
    fail("internal: flag '{}' is not declared for '{}'", name, command_);
}

void Flags::parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            help_ = true;
            continue;
        }
        for (const auto& sp : specs_)
            if (!sp.alias.empty() && arg == sp.alias) arg = sp.name;
        if (arg.rfind("--", 0) != 0 || arg == "--") {
            positional_.push_back(arg);
            continue;
        }
        std::string value;
        bool has_inline = false;
        if (auto eq = arg.find('='); eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_inline = true;
        }
        const FlagSpec* s = nullptr;
        for (const auto& sp : specs_)
            if (sp.name == arg) s = &sp;
        if (!s) throw UsageError(fmt::format("{}: unknown flag '{}'", command_, arg));
        if (values_.count(arg)) throw UsageError(fmt::format("{}: flag '{}' given twice", command_, arg));
        if (s->value_name.empty()) {
            if (has_inline) throw UsageError(fmt::format("{}: flag '{}' takes no value", command_, arg));
            value.assign(1, '1');  // (assigning a literal trips a GCC 12 -Wrestrict false positive)
        } else if (!has_inline) {
            if (i + 1 >= argc)
                throw UsageError(fmt::format("{}: flag '{}' needs a value ({})", command_, arg, s->value_name));
            value = argv[++i];
        }
        values_[arg] = value;
    }
}

bool Flags::given(std::string_view name) const {
    spec(name);
    return values_.find(name) != values_.end();
}

bool Flags::on(std::string_view name) const { return given(name); }

std::string Flags::str(std::string_view name) const {
    const FlagSpec& s = spec(name);
    auto it = values_.find(name);
    return it == values_.end() ? s.def : it->second;
}

int64_t Flags::integer(std::string_view name) const {
    const std::string v = str(name);
    int64_t out = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (v.empty() || ec != std::errc() || p != v.data() + v.size())
        throw UsageError(fmt::format("{}: {} expects an integer, got '{}'", command_, name, v));
    return out;
}

int64_t Flags::integer_in(std::string_view name, int64_t lo, int64_t hi) const {
    const int64_t v = integer(name);
    if (v < lo || v > hi) throw UsageError(fmt::format("{} must be in {}..{}, got {}", name, lo, hi, v));
    return v;
}

double Flags::number(std::string_view name) const {
    const std::string v = str(name);
    try {
        size_t used = 0;
        const double d = std::stod(v, &used);
        if (used == v.size()) return d;
    } catch (const std::exception&) {
    }
    throw UsageError(fmt::format("{}: {} expects a number, got '{}'", command_, name, v));
}

std::string Flags::help_text() const {
    std::string out = fmt::format("usage: {}\n\n", usage_);
    size_t w = 0;
    auto left_of = [](const FlagSpec& s) {
        std::string left = s.alias.empty() ? s.name : s.alias + ", " + s.name;
        return s.value_name.empty() ? left : left + " " + s.value_name;
    };
    for (const auto& s : specs_) w = std::max(w, left_of(s).size());
    for (const auto& s : specs_) {
        std::string left = left_of(s);
        out += fmt::format("  {:<{}}  {}", left, w, s.doc);
        if (!s.def.empty()) out += fmt::format(" (default: {})", s.def);
        out += "\n";
    }
    return out;
}

std::string Flags::markdown() const {
    std::string out = fmt::format("### `{}`\n\n`{}`\n\n| flag | default | meaning |\n|---|---|---|\n", command_, usage_);
    for (const auto& s : specs_) {
        std::string left = s.alias.empty() ? s.name : s.alias + ", " + s.name;
        if (!s.value_name.empty()) left += " " + s.value_name;
        out += fmt::format("| `{}` | {} | {} |\n", left, s.def.empty() ? "" : "`" + s.def + "`", s.doc);
    }
    return out;
}

}  // namespace strata
