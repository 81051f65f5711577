// strata: the command-line entry point. Dispatches to a subcommand and is the one
// boundary where errors from the engine become a message and an exit code.
#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/flags.h"
#include "engine/core/log.h"
#include "tools/commands.h"

namespace {

struct Command {
    const char* name;
    int (*fn)(int, char**);
    const char* doc;
};

const Command kCommands[] = {
    {"inspect", strata::cmd_inspect, "print a GGUF file's metadata and tensor table; dump a tensor"},
    {"make-model", strata::cmd_make_model, "write a synthetic GGUF model (llama, qwen3, qwen3next)"},
    {"run", strata::cmd_run, "generate text from a prompt"},
    {"eval", strata::cmd_eval, "run tokens through the model and print the top logits"},
    {"tokenize", strata::cmd_tokenize, "text to token ids with a model's tokenizer"},
    {"detokenize", strata::cmd_detokenize, "token ids to text"},
    {"devices", strata::cmd_devices, "list the devices present and the GPU backend this build has (--bandwidth: measure each GPU's read bandwidth)"},
    {"flags-doc", strata::cmd_flags_doc, "print every command's flags as markdown (docs/flags.md)"},
};

void usage(std::FILE* out) {
    fmt::print(out, "strata {}: LLM inference across devices\n\nusage: strata COMMAND [flags]\n\ncommands:\n",
               STRATA_VERSION);
    for (const auto& c : kCommands) fmt::print(out, "  {:<12} {}\n", c.name, c.doc);
    fmt::print(out, "\n'strata COMMAND --help' shows a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
    strata::init_logging();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const std::string_view cmd = argv[1];
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
        usage(stdout);
        return 0;
    }
    if (cmd == "--version" || cmd == "version") {
        fmt::print("strata {}\n", STRATA_VERSION);
        return 0;
    }
    for (const auto& c : kCommands) {
        if (cmd != c.name) continue;
        try {
            return c.fn(argc - 1, argv + 1);
        } catch (const strata::UsageError& e) {
            fmt::print(stderr, "error: {}\n(see 'strata {} --help')\n", e.what(), c.name);
            return 2;
        } catch (const std::exception& e) {
            fmt::print(stderr, "error: {}\n", e.what());
            return 1;
        }
    }
    fmt::print(stderr, "error: unknown command '{}'\n\n", cmd);
    usage(stderr);
    return 2;
}
