// Pieces the model-running subcommands share: their common flags and the parsing of
// those flags into engine options.
#pragma once
#include <string>
#include <vector>

#include "engine/core/flags.h"
#include "engine/generate.h"

namespace strata::cli {

// -m, -t, -c, --cache-type, --batch: flags every command that loads a model takes.
std::vector<FlagSpec> model_flags();
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty,
// --frequency-penalty, --penalty-last-n, --seed
std::vector<FlagSpec> sampling_flags();

int threads_from(const Flags& f);
GgmlType cache_type_from(const Flags& f);
SamplingParams sampling_from(const Flags& f);
// The prompt text from -p or -f (exactly one of them).
std::string prompt_from(const Flags& f);
// Parses argv into f; when --help was given prints the help and returns false.
bool parse(Flags& f, int argc, char** argv);
std::vector<FlagSpec> concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b);

}  // namespace strata::cli
