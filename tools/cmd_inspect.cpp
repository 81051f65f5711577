// strata inspect: a GGUF file's metadata and tensor table, for people or (--json)
// machines; --dump writes one tensor dequantized to raw little-endian f32.
#include <cstdio>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/flags.h"
#include "engine/gguf/reader.h"
#include "engine/quant/quant.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace strata {

Flags inspect_flags() {
    return Flags("inspect", "strata inspect MODEL.gguf [--json] [--dump TENSOR --out FILE]",
                 {
                     {"--json", "", "", "print metadata and tensors as one JSON object"},
                     {"--max-array", "N", "16", "array elements shown per key (0 = all)"},
                     {"--dump", "TENSOR", "", "write this tensor dequantized as raw little-endian f32"},
                     {"--out", "FILE", "", "output file for --dump"},
                 });
}

namespace {

nlohmann::json to_json(const GgufValue& v, size_t max_array) {
    const auto& st = v.storage();
    switch (v.type()) {
        case GgufType::STRING: return v.as_string();
        case GgufType::BOOL: return v.as_bool();
        case GgufType::FLOAT32: case GgufType::FLOAT64: return v.as_float();
        case GgufType::ARRAY: {
            const auto& a = v.as_array();
            const size_t n = max_array == 0 ? a.size() : std::min(a.size(), max_array);
            nlohmann::json arr = nlohmann::json::array();
            for (size_t i = 0; i < n; ++i) arr.push_back(to_json(a[i], max_array));
            if (n == a.size()) return arr;
            return {{"array_of", gguf_type_name(v.elem_type())}, {"count", a.size()}, {"first", arr}};
        }
        default:
            if (std::holds_alternative<uint64_t>(st)) return std::get<uint64_t>(st);
            return std::get<int64_t>(st);
    }
}

void print_json(const GgufFile& f, size_t max_array) {
    nlohmann::json j;
    j["file"] = f.path();
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["file_size"] = f.file_size();
    nlohmann::json meta = nlohmann::json::object();
    nlohmann::json meta_types = nlohmann::json::object();
    for (const auto& [k, v] : f.metadata()) {
        meta[k] = to_json(v, max_array);
        meta_types[k] = v.type() == GgufType::ARRAY
                            ? fmt::format("array[{}]", gguf_type_name(v.elem_type()))
                            : std::string(gguf_type_name(v.type()));
    }
    j["metadata"] = meta;
    j["metadata_types"] = meta_types;
    nlohmann::json ts = nlohmann::json::array();
    for (const auto& t : f.tensors()) {
        ts.push_back({{"name", t.name},
                      {"type", type_info(t.type).name},
                      {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                      {"offset", t.offset},
                      {"bytes", t.nbytes}});
    }
    j["tensors"] = ts;
    fmt::print("{}\n", j.dump(2));
}

void print_text(const GgufFile& f, size_t max_array) {
    fmt::print("file: {}\nGGUF v{}, {} bytes, alignment {}, tensor data at offset {}\n\n", f.path(),
               f.version(), f.file_size(), f.alignment(), f.data_offset());
    fmt::print("metadata ({} keys):\n", f.metadata().size());
    size_t w = 0;
    for (const auto& [k, v] : f.metadata()) w = std::max(w, k.size());
    for (const auto& [k, v] : f.metadata())
        fmt::print("  {:<{}}  {:<6}  {}\n", k, w, gguf_type_name(v.type()), v.to_string(max_array ? max_array : SIZE_MAX));

    fmt::print("\ntensors ({}):\n", f.tensors().size());
    size_t nw = 4;
    for (const auto& t : f.tensors()) nw = std::max(nw, t.name.size());
    fmt::print("  {:<{}}  {:<8}  {:<24}  {:>14}  {:>12}\n", "name", nw, "type", "shape", "offset", "bytes");
    std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // type -> (elements, bytes)
    int64_t n_params = 0;
    for (const auto& t : f.tensors()) {
        const std::string_view tn = type_info(t.type).name;
        fmt::print("  {:<{}}  {:<8}  {:<24}  {:>14}  {:>12}\n", t.name, nw, tn, t.shape_string(), t.offset, t.nbytes);
        auto& bt = by_type[std::string(tn)];
        bt.first += t.n_elements();
        bt.second += t.nbytes;
        n_params += t.n_elements();
    }
    fmt::print("\n{} parameters in {} tensors\n", n_params, f.tensors().size());
    for (const auto& [tn, eb] : by_type)
        fmt::print("  {:<8} {:>14} values {:>14} bytes  {:.3f} bits/value\n", tn, eb.first, eb.second,
                   eb.first ? 8.0 * static_cast<double>(eb.second) / static_cast<double>(eb.first) : 0.0);
}

void dump_tensor(const GgufFile& f, const std::string& name, const std::string& out) {
    const GgufTensorInfo& t = f.tensor(name);
    const TypeInfo& ti = type_info(t.type);
    if (!ti.supported) fail("tensor '{}' has type {}, which Strata cannot dequantize", name, ti.name);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(out.c_str(), "wb"), &std::fclose);
    if (!fp) fail("{}: cannot open for writing", out);
    const size_t rb = row_bytes(t.type, t.ne[0]);
    std::vector<float> row(static_cast<size_t>(t.ne[0]));
    for (int64_t r = 0; r < t.n_rows(); ++r) {
        dequantize_row(t.type, t.data + static_cast<size_t>(r) * rb, row.data(), t.ne[0]);
        if (std::fwrite(row.data(), sizeof(float), row.size(), fp.get()) != row.size())
            fail("{}: write failed", out);
    }
    fmt::print(stderr, "wrote {} ({} {} values as f32) to {}\n", name, t.n_elements(), ti.name, out);
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
    Flags flags = inspect_flags();
    if (!cli::parse(flags, argc, argv)) return 0;
    if (flags.positional().size() != 1) throw UsageError("inspect: expected exactly one MODEL.gguf");
    const int64_t max_array = flags.integer("--max-array");
    if (max_array < 0) throw UsageError("inspect: --max-array must be >= 0");
    GgufFile f = GgufFile::open(flags.positional()[0]);
    if (flags.given("--dump")) {
        if (!flags.given("--out")) throw UsageError("inspect: --dump needs --out FILE");
        dump_tensor(f, flags.str("--dump"), flags.str("--out"));
        return 0;
    }
    if (flags.on("--json")) print_json(f, static_cast<size_t>(max_array));
    else print_text(f, static_cast<size_t>(max_array));
    return 0;
}

}  // namespace strata
