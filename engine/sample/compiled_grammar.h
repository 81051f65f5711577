// The byte-level form of a Grammar that the matcher runs: flat rules whose
// alternatives are sequences of byte sets and rule references.
//
// Compiling lowers everything else: a literal becomes one byte set per byte; a character
// class becomes the UTF-8 byte sequences of its code points (an anonymous rule of
// alternatives, or one byte set when all are ASCII); an alternative or a group becomes
// an anonymous rule; x{m,n} becomes m copies of x then a chain of n-m nested optionals,
// and x* a right-recursive rule. Right recursion in tail position costs the matcher no
// stack (grammar_stacks.h), so long repetitions stay cheap.
//
// Refused with strata::Error: an undefined or missing root rule, left recursion
// (including through rules that can match nothing, such as ("")*), a grammar above
// kMaxElements elements once unrolled.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sample/grammar.h"

namespace strata {

struct ByteSet {
    std::array<uint64_t, 4> bits{};
    bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
    void add(uint8_t lo, uint8_t hi) {
        for (unsigned b = lo; b <= hi; ++b) bits[b >> 6] |= uint64_t{1} << (b & 63);
    }
    bool operator==(const ByteSet&) const = default;
};

struct CompiledGrammar {
    enum class Op : uint8_t { Byte, Ref, End };
    struct Elem {
        Op op;
        int32_t arg;  // Byte: index into sets; Ref: the rule; End: unused
    };
    static constexpr size_t kMaxElements = size_t{1} << 22;

    std::vector<Elem> elems;               // every alternative, each closed by End
    std::vector<ByteSet> sets;             // distinct byte sets
    std::vector<std::vector<int32_t>> alts;  // per rule: where each alternative starts in elems
    std::vector<std::string> names;        // per rule; anonymous ones: "<named rule>/<n>"
    int32_t root = 0;

    static std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, std::string_view root = "root");
};

}  // namespace strata
