#include "engine/gguf/writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "engine/core/error.h"

namespace strata {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kGgufVersion = 3;

// Output sinks: the same serializer writes to memory (tests) or to a file (models
// of several GB, which should not be held twice in memory).
struct VecSink {
    std::vector<uint8_t>& out;
    void put(const void* p, size_t n) {
        if (n == 0) return;
        const size_t old = out.size();
        out.resize(old + n);
        std::memcpy(out.data() + old, p, n);
    }
};
struct FileSink {
    std::FILE* f;
    std::string path;
    void put(const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f) != n) fail("{}: write failed: {}", path, std::strerror(errno));
    }
};

template <typename Sink>
class Serializer {
public:
    explicit Serializer(Sink& s) : s_(s) {}
    template <typename T> void pod(T v) { s_.put(&v, sizeof v); pos_ += sizeof v; }
    void bytes(const void* p, size_t n) { s_.put(p, n); pos_ += n; }
    void str(const std::string& v) { pod<uint64_t>(v.size()); bytes(v.data(), v.size()); }
    void pad_to(uint64_t alignment) {
        static const uint8_t zeros[256] = {};
        while (pos_ % alignment) {
            const uint64_t n = std::min<uint64_t>(alignment - pos_ % alignment, sizeof zeros);
            bytes(zeros, n);
        }
    }
    void value(const GgufValue& v) {
        const auto& st = v.storage();
        switch (v.type()) {
            case GgufType::UINT8: pod<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(st))); break;
            case GgufType::INT8: pod<int8_t>(static_cast<int8_t>(std::get<int64_t>(st))); break;
            case GgufType::UINT16: pod<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(st))); break;
            case GgufType::INT16: pod<int16_t>(static_cast<int16_t>(std::get<int64_t>(st))); break;
            case GgufType::UINT32: pod<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(st))); break;
            case GgufType::INT32: pod<int32_t>(static_cast<int32_t>(std::get<int64_t>(st))); break;
            case GgufType::UINT64: pod<uint64_t>(std::get<uint64_t>(st)); break;
            case GgufType::INT64: pod<int64_t>(std::get<int64_t>(st)); break;
            case GgufType::FLOAT32: pod<float>(static_cast<float>(std::get<double>(st))); break;
            case GgufType::FLOAT64: pod<double>(std::get<double>(st)); break;
            case GgufType::BOOL: pod<uint8_t>(std::get<bool>(st) ? 1 : 0); break;
            case GgufType::STRING: str(std::get<std::string>(st)); break;
            case GgufType::ARRAY: {
                const auto& a = std::get<std::vector<GgufValue>>(st);
                pod<uint32_t>(static_cast<uint32_t>(v.elem_type()));
                pod<uint64_t>(a.size());
                for (const auto& e : a) value(e);
                break;
            }
        }
    }
    uint64_t pos() const { return pos_; }

private:
    Sink& s_;
    uint64_t pos_ = 0;
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

template <typename Sink>
void serialize(Sink& sink, uint32_t alignment,
               const std::vector<std::pair<std::string, GgufValue>>& kv,
               const auto& tensors) {
    Serializer<Sink> s(sink);
    s.template pod<uint32_t>(kGgufMagic);
    s.template pod<uint32_t>(kGgufVersion);
    s.template pod<uint64_t>(tensors.size());
    s.template pod<uint64_t>(kv.size());
    for (const auto& [key, val] : kv) {
        s.str(key);
        s.template pod<uint32_t>(static_cast<uint32_t>(val.type()));
        s.value(val);
    }
    uint64_t offset = 0;  // relative to the data section; packed in info order
    for (const auto& t : tensors) {
        s.str(t.name);
        s.template pod<uint32_t>(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) s.template pod<uint64_t>(static_cast<uint64_t>(d));
        s.template pod<uint32_t>(static_cast<uint32_t>(t.type));
        s.template pod<uint64_t>(offset);
        offset = align_up(offset + t.data.size(), alignment);
    }
    s.pad_to(alignment);
    for (const auto& t : tensors) {
        s.bytes(t.data.data(), t.data.size());
        s.pad_to(alignment);
    }
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
    STRATA_CHECK(alignment >= 8 && (alignment & (alignment - 1)) == 0,
                 "GGUF alignment must be a power of two >= 8, got {}", alignment);
    if (alignment != 32) set("general.alignment", GgufValue::u32(alignment));
}

void GgufWriter::set(const std::string& key, GgufValue value) {
    for (auto& [k, v] : kv_)
        if (k == key) { v = std::move(value); return; }
    kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
    STRATA_CHECK(!name.empty() && name.size() < 64, "tensor name '{}' must be 1..63 bytes", name);
    STRATA_CHECK(!ne.empty() && ne.size() <= 4, "tensor '{}': {} dims (1..4 allowed)", name, ne.size());
    const TypeInfo* ti = type_info(static_cast<uint32_t>(type));
    STRATA_CHECK(ti != nullptr, "tensor '{}': unknown type id {}", name, static_cast<uint32_t>(type));
    for (int64_t d : ne) STRATA_CHECK(d > 0, "tensor '{}': dimension {} must be positive", name, d);
    STRATA_CHECK(ne[0] % ti->block_size == 0, "tensor '{}': ne[0]={} is not a multiple of {}'s block {}",
                 name, ne[0], ti->name, ti->block_size);
    uint64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= static_cast<uint64_t>(ne[i]);
    const uint64_t want = row_bytes(type, ne[0]) * rows;
    STRATA_CHECK(data.size() == want, "tensor '{}': {} data bytes, shape needs {}", name, data.size(), want);
    for (const auto& t : tensors_) STRATA_CHECK(t.name != name, "duplicate tensor name '{}'", name);
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    std::vector<uint8_t> out;
    VecSink sink{out};
    serialize(sink, alignment_, kv_, tensors_);
    return out;
}

void GgufWriter::write(const std::string& path) const {
    const std::string tmp = path + ".tmp";
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) fail("{}: cannot open for writing: {}", tmp, std::strerror(errno));
    FileSink sink{f.get(), tmp};
    try {
        serialize(sink, alignment_, kv_, tensors_);
        if (std::fclose(f.release()) != 0) fail("{}: close failed: {}", tmp, std::strerror(errno));
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove(tmp, ec);
        throw;
    }
    std::filesystem::rename(tmp, path);
}

}  // namespace strata
