// GGUF reader: memory-mapped, v2 and v3, every offset, count and size checked
// against the file before use. A malformed file raises strata::Error naming the
// file and what is wrong; it never reads out of bounds.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/gguf/value.h"
#include "engine/quant/types.h"

namespace strata {

struct GgufTensorInfo {
    std::string name;
    GgmlType type;
    uint32_t n_dims = 0;
    std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order, fastest first; missing dims are 1
    uint64_t offset = 0;                     // relative to the data section
    uint64_t nbytes = 0;
    const uint8_t* data = nullptr;           // points into the mapping

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    std::string shape_string() const;  // "[2048, 151936]"
};

class GgufFile {
public:
    // Map and parse a file.
    static GgufFile open(const std::string& path);
    // Parse a copy of the given bytes (tests, fuzzing); `name` is used in errors.
    static GgufFile from_bytes(const uint8_t* data, size_t size, std::string name = "<memory>");

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    ~GgufFile();

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // absolute start of tensor data
    uint64_t file_size() const { return size_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed access: throws strata::Error for a missing key or a wrong type; the message
    // names the file and the key.
    const GgufValue& get(std::string_view key) const;
    std::string get_string(std::string_view key) const;
    int64_t get_int(std::string_view key) const;
    uint64_t get_uint(std::string_view key) const;
    double get_float(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    // Same, with a default for a missing key (a present key of the wrong type still throws).
    std::string get_string(std::string_view key, std::string def) const;
    int64_t get_int(std::string_view key, int64_t def) const;
    double get_float(std::string_view key, double def) const;
    bool get_bool(std::string_view key, bool def) const;
    std::vector<std::string> get_string_array(std::string_view key) const;
    std::vector<int64_t> get_int_array(std::string_view key) const;
    std::vector<float> get_float_array(std::string_view key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const;
    const GgufTensorInfo& tensor(std::string_view name) const;  // throws when absent

private:
    struct Mapping;
    GgufFile() = default;
    void parse();
    template <typename F> auto typed(std::string_view key, F&& f) const;

    std::string path_;
    std::unique_ptr<Mapping> map_;
    const uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace strata
