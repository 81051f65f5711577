// Subcommands of the `strata` CLI. Each takes argv with argv[0] = the command name
// and returns the process exit code (0 ok, 1 failure, 2 bad usage).
#pragma once

namespace strata {

int cmd_inspect(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);

}  // namespace strata
