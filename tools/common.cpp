#include "tools/common.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace strata::cli {

bool parse(Flags& f, int argc, char** argv) {
    f.parse(argc, argv);
    if (!f.help()) return true;
    fmt::print("{}", f.help_text());
    return false;
}

std::string prompt_from(const Flags& f) {
    const bool p = f.given("--prompt"), file = f.given("--file");
    if (p == file) throw UsageError("give exactly one of -p PROMPT and -f FILE");
    if (p) return f.str("--prompt");
    std::ifstream in(f.str("--file"), std::ios::binary);
    if (!in) fail("{}: cannot open prompt file", f.str("--file"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace strata::cli
