// GGUF v3 writer: metadata and tensors with correct alignment. Tensors are laid out
// in the order they are added, each at a multiple of the alignment (as ggml packs
// them), so ggml's strict reader accepts the file.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf/value.h"
#include "engine/quant/types.h"

namespace strata {

class GgufWriter {
public:
    explicit GgufWriter(uint32_t alignment = 32);

    // Set (or replace) a metadata key. Keys keep the order of first insertion.
    void set(const std::string& key, GgufValue value);

    // Add a tensor. ne is ggml order (fastest first, 1..4 dims); data must hold exactly
    // row_bytes(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes. Names must be unique.
    void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                    std::vector<uint8_t> data);

    // Write the whole file (to path + ".tmp", then renamed into place).
    void write(const std::string& path) const;
    // Serialize the whole file to memory (tests, fuzz corpus).
    std::vector<uint8_t> to_bytes() const;

private:
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> data;
    };
    uint32_t alignment_;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace strata
