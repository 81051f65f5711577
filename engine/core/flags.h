// The one registry of command-line flags: each command declares its flags once
// (name, value name, default, one-line doc); parsing, --help and docs/flags.md all
// come from that declaration. No code reads argv or getenv on its own.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace strata {

struct FlagSpec {
    std::string name;        // "--out"
    std::string value_name;  // "FILE"; empty for a switch that takes no value
    std::string def;         // default value; empty = none
    std::string doc;         // one line
    std::string alias = {};  // optional short form: "-m"
};

// A bad command line: the CLI prints the message and the usage, and exits 2.
class UsageError : public Error {
public:
    using Error::Error;
};

class Flags {
public:
    Flags(std::string command, std::string usage, std::vector<FlagSpec> specs);

    // argv[0] is the command name. Unknown flags, missing values and repeated flags
    // raise UsageError. "--help"/"-h" sets help().
    void parse(int argc, char** argv);

    bool help() const { return help_; }
    std::string help_text() const;
    std::string markdown() const;  // a table for docs/flags.md
    const std::vector<FlagSpec>& specs() const { return specs_; }
    const std::vector<std::string>& positional() const { return positional_; }

    bool given(std::string_view name) const;       // set on the command line
    bool on(std::string_view name) const;          // a switch
    std::string str(std::string_view name) const;  // value or default
    int64_t integer(std::string_view name) const;  // value or default, checked
    // integer() within [lo, hi]; UsageError naming the flag and the range otherwise.
    int64_t integer_in(std::string_view name, int64_t lo, int64_t hi) const;
    double number(std::string_view name) const;

private:
    const FlagSpec& spec(std::string_view name) const;

    std::string command_, usage_;
    std::vector<FlagSpec> specs_;
    std::map<std::string, std::string, std::less<>> values_;
    std::vector<std::string> positional_;
    bool help_ = false;
};

}  // namespace strata
