// The flag registry: parsing, defaults, strict errors, help text.
#include <catch2/catch.hpp>

#include "engine/core/flags.h"

using namespace strata;

namespace {

Flags demo() {
    return Flags("demo", "strata demo [flags] FILE",
                 {{"--out", "FILE", "", "output file"},
                  {"--n", "N", "4", "a count"},
                  {"--x", "X", "0.5", "a number"},
                  {"--json", "", "", "a switch"}});
}

void parse(Flags& f, std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    f.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("flags: values, defaults, switches and positionals", "[flags]") {
    Flags f = demo();
    parse(f, {"demo", "--out", "a.bin", "--n=7", "in.gguf", "--json"});
    CHECK(f.str("--out") == "a.bin");
    CHECK(f.integer("--n") == 7);
    CHECK(f.number("--x") == 0.5);
    CHECK(f.on("--json"));
    CHECK_FALSE(f.given("--x"));
    CHECK(f.positional() == std::vector<std::string>{"in.gguf"});
    CHECK_FALSE(f.help());
}

TEST_CASE("flags: bad command lines are refused clearly", "[flags]") {
    Flags f = demo();
    CHECK_THROWS_AS(parse(f, {"demo", "--nope"}), UsageError);
    Flags g = demo();
    CHECK_THROWS_WITH(parse(g, {"demo", "--out"}), Catch::Contains("needs a value"));
    Flags h = demo();
    CHECK_THROWS_WITH(parse(h, {"demo", "--n", "1", "--n", "2"}), Catch::Contains("given twice"));
    Flags i = demo();
    CHECK_THROWS_WITH(parse(i, {"demo", "--json=1"}), Catch::Contains("takes no value"));
    Flags j = demo();
    parse(j, {"demo", "--n", "12x", "--x", "abc"});
    CHECK_THROWS_WITH(j.integer("--n"), Catch::Contains("expects an integer"));
    CHECK_THROWS_WITH(j.number("--x"), Catch::Contains("expects a number"));
    CHECK_THROWS(j.str("--undeclared"));
}

TEST_CASE("flags: help lists every flag with its default", "[flags]") {
    Flags f = demo();
    parse(f, {"demo", "-h"});
    CHECK(f.help());
    const std::string h = f.help_text();
    CHECK(h.find("--out FILE") != std::string::npos);
    CHECK(h.find("(default: 4)") != std::string::npos);
    CHECK(f.markdown().find("| `--n N` | `4` | a count |") != std::string::npos);
}
