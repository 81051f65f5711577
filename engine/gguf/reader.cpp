#include "engine/gguf/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace strata {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF"
constexpr int kMaxArrayDepth = 8;            // nested arrays deeper than this are refused

// Reads little-endian primitives from [base, base+size); every read is bounds-checked
// and a failure names the file, the offset and what was being read.
class Cursor {
public:
    Cursor(const uint8_t* base, uint64_t size, const std::string& file)
        : base_(base), size_(size), file_(file) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    template <typename... Args>
    [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
        fail("{}: {} (at byte offset {} of {})", file_, fmt::format(f, std::forward<Args>(args)...),
             pos_, size_);
    }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining())
            error("truncated file: {} needs {} bytes, only {} remain", what, n, remaining());
    }

    template <typename T> T pod(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, base_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string str(std::string_view what) {
        const uint64_t len = pod<uint64_t>(what);
        if (len > remaining())
            error("{}: string length {} is longer than the {} bytes left in the file", what, len,
                  remaining());
        std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
        pos_ += len;
        return s;
    }

private:
    const uint8_t* base_;
    uint64_t size_;
    const std::string& file_;
    uint64_t pos_ = 0;
};

// Smallest encoded size of one value of type t: lets a huge array count be refused
// before anything is allocated for it.
uint64_t min_encoded_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        case GgufType::STRING: return 8;
        case GgufType::ARRAY: return 12;
    }
    return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

GgufValue read_value(Cursor& c, GgufType t, std::string_view key, int depth) {
    switch (t) {
        case GgufType::UINT8: return GgufValue::u8(c.pod<uint8_t>(key));
        case GgufType::INT8: return GgufValue::i8(c.pod<int8_t>(key));
        case GgufType::UINT16: return GgufValue::u16(c.pod<uint16_t>(key));
        case GgufType::INT16: return GgufValue::i16(c.pod<int16_t>(key));
        case GgufType::UINT32: return GgufValue::u32(c.pod<uint32_t>(key));
        case GgufType::INT32: return GgufValue::i32(c.pod<int32_t>(key));
        case GgufType::UINT64: return GgufValue::u64(c.pod<uint64_t>(key));
        case GgufType::INT64: return GgufValue::i64(c.pod<int64_t>(key));
        case GgufType::FLOAT32: return GgufValue::f32(c.pod<float>(key));
        case GgufType::FLOAT64: return GgufValue::f64(c.pod<double>(key));
        case GgufType::BOOL: {
            const uint8_t b = c.pod<uint8_t>(key);
            if (b > 1) c.error("key '{}': bool value {} is neither 0 nor 1", key, b);
            return GgufValue::boolean(b != 0);
        }
        case GgufType::STRING: return GgufValue::str(c.str(key));
        case GgufType::ARRAY: {
            if (depth >= kMaxArrayDepth) c.error("key '{}': arrays nested deeper than {}", key, kMaxArrayDepth);
            const uint32_t et = c.pod<uint32_t>(key);
            if (!valid_value_type(et)) c.error("key '{}': unknown array element type {}", key, et);
            const uint64_t n = c.pod<uint64_t>(key);
            const GgufType elem = static_cast<GgufType>(et);
            if (n > c.remaining() / min_encoded_size(elem))
                c.error("key '{}': array of {} {} elements cannot fit in the {} bytes left", key, n,
                        gguf_type_name(elem), c.remaining());
            std::vector<GgufValue> v;
            v.reserve(static_cast<size_t>(n));
            for (uint64_t i = 0; i < n; ++i) v.push_back(read_value(c, elem, key, depth + 1));
            return GgufValue::array(elem, std::move(v));
        }
    }
    c.error("key '{}': unknown value type {}", key, static_cast<uint32_t>(t));
}

uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

}  // namespace

struct GgufFile::Mapping {
    void* addr = nullptr;
    size_t len = 0;
    std::vector<uint8_t> owned;  // from_bytes keeps its copy here
    ~Mapping() {
        if (addr) munmap(addr, len);
    }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

std::string GgufTensorInfo::shape_string() const {
    std::string s = "[";
    for (uint32_t i = 0; i < n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

GgufFile GgufFile::open(const std::string& path) {
    GgufFile f;
    f.path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st{};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    f.map_ = std::make_unique<Mapping>();
    f.size_ = static_cast<uint64_t>(st.st_size);
    if (f.size_ == 0) {
        ::close(fd);
        fail("{}: empty file, not a GGUF model", path);
    }
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping stays valid without the descriptor
    if (p == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(err));
    f.map_->addr = p;
    f.map_->len = f.size_;
    f.base_ = static_cast<const uint8_t*>(p);
    f.parse();
    return f;
}

GgufFile GgufFile::from_bytes(const uint8_t* data, size_t size, std::string name) {
    GgufFile f;
    f.path_ = std::move(name);
    f.map_ = std::make_unique<Mapping>();
    f.map_->owned.assign(data, data + size);
    f.base_ = f.map_->owned.data();
    f.size_ = size;
    f.parse();
    return f;
}

void GgufFile::parse() {
    Cursor c(base_, size_, path_);
    const uint32_t magic = c.pod<uint32_t>("magic");
    if (magic != kGgufMagic)
        c.error("bad magic 0x{:08x}: not a GGUF file (expected \"GGUF\")", magic);
    version_ = c.pod<uint32_t>("version");
    if (version_ == 1) c.error("GGUF version 1 is not supported (only 2 and 3)");
    if ((version_ & 0xFFFF) == 0) c.error("GGUF version 0x{:08x} looks big-endian; only little-endian files are supported", version_);
    if (version_ != 2 && version_ != 3) c.error("unsupported GGUF version {} (only 2 and 3)", version_);
    const uint64_t n_tensors = c.pod<uint64_t>("tensor count");
    const uint64_t n_kv = c.pod<uint64_t>("metadata count");
    // A key is at least 8 + 4 + 1 bytes, a tensor info at least 8 + 4 + 8 + 4 + 8.
    if (n_kv > c.remaining() / 13) c.error("metadata count {} cannot fit in the file", n_kv);
    if (n_tensors > c.remaining() / 32) c.error("tensor count {} cannot fit in the file", n_tensors);

    kv_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key = c.str(fmt::format("metadata key #{}", i));
        if (key.empty()) c.error("metadata key #{} is empty", i);
        const uint32_t t = c.pod<uint32_t>(key);
        if (!valid_value_type(t)) c.error("key '{}': unknown value type {}", key, t);
        GgufValue v = read_value(c, static_cast<GgufType>(t), key, 0);
        if (kv_index_.count(key)) c.error("duplicate metadata key '{}'", key);
        kv_index_.emplace(key, kv_.size());
        kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const GgufValue* a = find("general.alignment")) {
        if (a->type() != GgufType::UINT32)
            c.error("general.alignment must be u32, found {}", gguf_type_name(a->type()));
        const uint64_t al = a->as_uint();
        if (al == 0 || (al & (al - 1)) != 0) c.error("general.alignment {} is not a power of two", al);
        alignment_ = static_cast<uint32_t>(al);
    }

    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        GgufTensorInfo t;
        t.name = c.str(fmt::format("tensor #{} name", i));
        if (t.name.empty()) c.error("tensor #{} has an empty name", i);
        t.n_dims = c.pod<uint32_t>(t.name);
        if (t.n_dims < 1 || t.n_dims > 4) c.error("tensor '{}': {} dimensions (1..4 allowed)", t.name, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; ++d) {
            const uint64_t ne = c.pod<uint64_t>(t.name);
            if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
                c.error("tensor '{}': dimension {} = {} is out of range", t.name, d, ne);
            t.ne[d] = static_cast<int64_t>(ne);
        }
        const uint32_t type_id = c.pod<uint32_t>(t.name);
        const TypeInfo* ti = type_info(type_id);
        if (!ti) c.error("tensor '{}': unknown ggml type id {}", t.name, type_id);
        t.type = ti->type;
        t.offset = c.pod<uint64_t>(t.name);

        int64_t n_el = 1;
        for (int64_t d : t.ne)
            if (__builtin_mul_overflow(n_el, d, &n_el))
                c.error("tensor '{}': element count of shape {} overflows", t.name, t.shape_string());
        if (t.ne[0] % ti->block_size != 0)
            c.error("tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", t.name,
                    t.ne[0], ti->name, ti->block_size);
        uint64_t nbytes = static_cast<uint64_t>(t.ne[0] / ti->block_size);
        if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(ti->type_size), &nbytes))
            c.error("tensor '{}': byte size of shape {} overflows", t.name, t.shape_string());
        for (int d = 1; d < 4; ++d)
            if (__builtin_mul_overflow(nbytes, static_cast<uint64_t>(t.ne[d]), &nbytes))
                c.error("tensor '{}': byte size of shape {} overflows", t.name, t.shape_string());
        t.nbytes = nbytes;
        if (tensor_index_.count(t.name)) c.error("duplicate tensor name '{}'", t.name);
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    data_offset_ = align_up(c.pos(), alignment_);
    if (!tensors_.empty() && data_offset_ > size_)
        c.error("truncated file: the data section would start at {} past the end", data_offset_);
    const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
    for (auto& t : tensors_) {
        if (t.offset % alignment_ != 0)
            fail("{}: tensor '{}': offset {} is not a multiple of the alignment {}", path_, t.name,
                 t.offset, alignment_);
        if (t.offset > data_size || t.nbytes > data_size - t.offset)
            fail("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file "
                 "(data section holds {} bytes): the file is truncated or corrupt",
                 path_, t.name, t.nbytes, t.offset, data_size);
        t.data = base_ + data_offset_ + t.offset;
    }
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) fail("{}: missing metadata key '{}'", path_, key);
    return *v;
}

// Runs f(value, what) with errors from the value prefixed by the file name.
template <typename F> auto GgufFile::typed(std::string_view key, F&& f) const {
    const GgufValue& v = get(key);
    const std::string what = fmt::format("{}: key '{}'", path_, key);
    return f(v, std::string_view(what));
}

std::string GgufFile::get_string(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) { return v.as_string(w); });
}
int64_t GgufFile::get_int(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) { return v.as_int(w); });
}
uint64_t GgufFile::get_uint(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) { return v.as_uint(w); });
}
double GgufFile::get_float(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) { return v.as_float(w); });
}
bool GgufFile::get_bool(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) { return v.as_bool(w); });
}
std::string GgufFile::get_string(std::string_view k, std::string def) const {
    return has(k) ? get_string(k) : def;
}
int64_t GgufFile::get_int(std::string_view k, int64_t def) const { return has(k) ? get_int(k) : def; }
double GgufFile::get_float(std::string_view k, double def) const { return has(k) ? get_float(k) : def; }
bool GgufFile::get_bool(std::string_view k, bool def) const { return has(k) ? get_bool(k) : def; }

std::vector<std::string> GgufFile::get_string_array(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) {
        std::vector<std::string> out;
        for (const auto& e : v.as_array(w)) out.push_back(e.as_string(w));
        return out;
    });
}
std::vector<int64_t> GgufFile::get_int_array(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) {
        std::vector<int64_t> out;
        for (const auto& e : v.as_array(w)) out.push_back(e.as_int(w));
        return out;
    });
}
std::vector<float> GgufFile::get_float_array(std::string_view k) const {
    return typed(k, [](const GgufValue& v, std::string_view w) {
        std::vector<float> out;
        for (const auto& e : v.as_array(w)) out.push_back(static_cast<float>(e.as_float(w)));
        return out;
    });
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
    const GgufTensorInfo* t = find_tensor(name);
    if (!t) fail("{}: missing tensor '{}'", path_, name);
    return *t;
}

}  // namespace strata
