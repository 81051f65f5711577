// libFuzzer target for the GGUF reader: any byte string must parse or raise
// strata::Error; a crash, a sanitizer report or an out-of-bounds read is a bug.
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        strata::GgufFile f = strata::GgufFile::from_bytes(data, size, "fuzz.gguf");
        // Touch what a loader touches: every tensor's bytes and every value.
        volatile uint8_t sink = 0;
        for (const auto& t : f.tensors())
            if (t.nbytes) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];
        for (const auto& [k, v] : f.metadata()) (void)v.to_string(4);
    } catch (const strata::Error&) {
    }
    return 0;
}
