// Pieces the model-running subcommands share beyond engine/options.h.
#pragma once
#include <string>

#include "engine/core/flags.h"

namespace strata::cli {

// Parses argv into f; when --help was given prints the help and returns false.
bool parse(Flags& f, int argc, char** argv);
// The prompt text from -p or -f (exactly one of them).
std::string prompt_from(const Flags& f);

}  // namespace strata::cli
