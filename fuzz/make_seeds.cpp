// Writes a small seed corpus for fuzz_gguf: valid files that cover every metadata
// value type, nested arrays, non-default alignment and a few tensor types.
#include <cstdio>
#include <string>

#include "engine/gguf/writer.h"

using namespace strata;

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    {
        GgufWriter w;
        w.set("general.architecture", GgufValue::str("llama"));
        w.set("a.u8", GgufValue::u8(1));
        w.set("a.i16", GgufValue::i16(-2));
        w.set("a.u64", GgufValue::u64(3));
        w.set("a.f64", GgufValue::f64(0.5));
        w.set("a.bool", GgufValue::boolean(false));
        w.set("a.tokens", GgufValue::str_array({"a", "b", "<|im_end|>"}));
        w.set("a.nested", GgufValue::array(GgufType::ARRAY, {GgufValue::f32_array({1.f, 2.f})}));
        w.add_tensor("w", GgmlType::F32, {4, 2}, std::vector<uint8_t>(32, 1));
        w.add_tensor("q", GgmlType::Q8_0, {32}, std::vector<uint8_t>(34, 2));
        w.write(dir + "/seed1.gguf");
    }
    {
        GgufWriter w(64);
        w.set("general.name", GgufValue::str("seed"));
        w.add_tensor("k", GgmlType::Q4_K, {256, 1, 1}, std::vector<uint8_t>(144, 3));
        w.add_tensor("h", GgmlType::F16, {2, 2, 2, 2}, std::vector<uint8_t>(32, 4));
        w.write(dir + "/seed2.gguf");
    }
    {
        GgufWriter w;
        w.write(dir + "/seed3.gguf");  // header only
    }
    return 0;
}
