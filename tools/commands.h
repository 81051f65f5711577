// Subcommands of the `strata` CLI. Each takes argv with argv[0] = the command name
// and returns the process exit code (0 ok, 1 failure, 2 bad usage).
#pragma once

#include "engine/core/flags.h"

namespace strata {

// Each command's flags, declared once (docs/flags.md is generated from these).
Flags inspect_flags();
Flags run_flags();
Flags eval_flags();
Flags tokenize_flags();
Flags detokenize_flags();

int cmd_inspect(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_devices(int argc, char** argv);  // what is present and what the build supports
// Prints docs/flags.md: every command's flags as markdown tables.
int cmd_flags_doc(int argc, char** argv);

}  // namespace strata
