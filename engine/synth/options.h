// Flags of `strata make-model`, declared once here (engine side) so the CLI and the
// tests parse exactly the same way. A bad flag or value raises UsageError (exit 2).
#pragma once
#include <string>

#include "engine/core/flags.h"
#include "engine/synth/model_writer.h"

namespace strata::synth {

Flags make_model_flags();

// Validated options from parsed flags; the output path is f.str("--out").
SynthOptions options_from_flags(const Flags& f);

// Lower-case names of the types --type accepts, comma separated.
std::string weight_type_names();

}  // namespace strata::synth
