// GGUF reader and writer: round trips of every value type, and a clear error (never
// a crash) for each kind of malformed file.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/core/error.h"
#include "engine/gguf/reader.h"
#include "engine/gguf/writer.h"

using namespace strata;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

GgufWriter sample_writer() {
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    w.set("k.u8", GgufValue::u8(200));
    w.set("k.i8", GgufValue::i8(-100));
    w.set("k.u16", GgufValue::u16(65000));
    w.set("k.i16", GgufValue::i16(-32000));
    w.set("k.u32", GgufValue::u32(4000000000u));
    w.set("k.i32", GgufValue::i32(-2000000000));
    w.set("k.u64", GgufValue::u64(18000000000000000000ull));
    w.set("k.i64", GgufValue::i64(-9000000000000000000ll));
    w.set("k.f32", GgufValue::f32(1.5f));
    w.set("k.f64", GgufValue::f64(-2.25));
    w.set("k.bool", GgufValue::boolean(true));
    w.set("k.str", GgufValue::str("hello \xe2\x96\x81 world"));
    w.set("k.strs", GgufValue::str_array({"a", "", "ccc"}));
    w.set("k.ints", GgufValue::i32_array({1, -2, 3}));
    w.set("k.nested", GgufValue::array(GgufType::ARRAY, {GgufValue::i32_array({1, 2}),
                                                         GgufValue::i32_array({})}));
    w.add_tensor("a", GgmlType::F32, {4, 2}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
    w.add_tensor("b", GgmlType::F32, {3}, f32_bytes({9, 10, 11}));
    return w;
}

// Expect parsing `bytes` to throw a strata::Error whose message contains `needle`.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
    try {
        GgufFile::from_bytes(bytes.data(), bytes.size(), "bad.gguf");
        FAIL("expected an error containing '" << needle << "'");
    } catch (const Error& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("bad.gguf") != std::string::npos);
        CHECK(msg.find(needle) != std::string::npos);
    }
}

template <typename T> void put(std::vector<uint8_t>& b, size_t off, T v) { std::memcpy(&b[off], &v, sizeof v); }

// A minimal file with one tensor, built by hand so offsets are known:
// header 24 bytes; no KV; tensor info: name "t" (8+1), n_dims (4), ne[0] (8), type (4), offset (8).
std::vector<uint8_t> one_tensor_file(uint32_t type, uint64_t ne0, uint64_t offset, size_t data_bytes) {
    std::vector<uint8_t> b;
    auto app = [&](const void* p, size_t n) { b.insert(b.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
    uint32_t magic = 0x46554747, ver = 3, ndims = 1;
    uint64_t nt = 1, nkv = 0, nlen = 1;
    app(&magic, 4); app(&ver, 4); app(&nt, 8); app(&nkv, 8);
    app(&nlen, 8); b.push_back('t'); app(&ndims, 4); app(&ne0, 8); app(&type, 4); app(&offset, 8);
    while (b.size() % 32) b.push_back(0);
    b.resize(b.size() + data_bytes, 0);
    return b;
}

}  // namespace

TEST_CASE("gguf: every value type round-trips through writer and reader", "[gguf]") {
    const auto bytes = sample_writer().to_bytes();
    GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size(), "mem");
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.data_offset() % 32 == 0);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get("k.u8").type() == GgufType::UINT8);
    CHECK(f.get_uint("k.u8") == 200);
    CHECK(f.get_int("k.i8") == -100);
    CHECK(f.get_uint("k.u16") == 65000);
    CHECK(f.get_int("k.i16") == -32000);
    CHECK(f.get_uint("k.u32") == 4000000000u);
    CHECK(f.get_int("k.i32") == -2000000000);
    CHECK(f.get_uint("k.u64") == 18000000000000000000ull);
    CHECK(f.get_int("k.i64") == -9000000000000000000ll);
    CHECK(f.get_float("k.f32") == 1.5);
    CHECK(f.get_float("k.f64") == -2.25);
    CHECK(f.get_bool("k.bool"));
    CHECK(f.get_string("k.str") == "hello \xe2\x96\x81 world");
    CHECK(f.get_string_array("k.strs") == std::vector<std::string>{"a", "", "ccc"});
    CHECK(f.get_int_array("k.ints") == std::vector<int64_t>{1, -2, 3});
    const auto& nested = f.get("k.nested").as_array();
    REQUIRE(nested.size() == 2);
    CHECK(nested[0].as_array().size() == 2);
    CHECK(nested[0].as_array()[1].as_int() == 2);
    CHECK(nested[1].as_array().empty());
    // Key order is kept.
    CHECK(f.metadata().front().first == "general.architecture");

    REQUIRE(f.tensors().size() == 2);
    const auto& a = f.tensor("a");
    CHECK(a.n_dims == 2);
    CHECK(a.ne[0] == 4);
    CHECK(a.ne[1] == 2);
    CHECK(a.nbytes == 32);
    float v[8];
    std::memcpy(v, a.data, 32);
    CHECK(v[7] == 8.0f);
    const auto& b = f.tensor("b");
    CHECK(b.offset == 32);  // packed at the alignment after "a"
    std::memcpy(v, b.data, 12);
    CHECK(v[2] == 11.0f);
    // Written back, the bytes are identical.
    GgufWriter w2;
    for (const auto& [k, val] : f.metadata()) w2.set(k, val);
    for (const auto& t : f.tensors())
        w2.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                      std::vector<uint8_t>(t.data, t.data + t.nbytes));
    CHECK(w2.to_bytes() == bytes);
}

TEST_CASE("gguf: typed access gives clear errors", "[gguf]") {
    const auto bytes = sample_writer().to_bytes();
    GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size(), "mem.gguf");
    CHECK_THROWS_WITH(f.get_int("nope"), Catch::Contains("missing metadata key 'nope'") && Catch::Contains("mem.gguf"));
    CHECK_THROWS_WITH(f.get_int("k.str"), Catch::Contains("expected an integer") && Catch::Contains("k.str"));
    CHECK_THROWS_WITH(f.get_string("k.u32"), Catch::Contains("expected a string"));
    CHECK_THROWS_WITH(f.get_bool("k.f32"), Catch::Contains("expected a bool"));
    CHECK_THROWS_WITH(f.get_uint("k.i8"), Catch::Contains("non-negative"));
    CHECK_THROWS_WITH(f.get_int("k.u64"), Catch::Contains("does not fit"));
    CHECK_THROWS_WITH(f.tensor("zzz"), Catch::Contains("missing tensor 'zzz'"));
    CHECK(f.get_int("absent", 7) == 7);
    CHECK_THROWS(f.get_int("k.str", 7));  // present but wrong type still throws
}

TEST_CASE("gguf: non-default alignment is honoured", "[gguf]") {
    GgufWriter w(64);
    w.add_tensor("x", GgmlType::F32, {3}, f32_bytes({1, 2, 3}));
    w.add_tensor("y", GgmlType::F32, {2}, f32_bytes({4, 5}));
    const auto bytes = w.to_bytes();
    GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size());
    CHECK(f.alignment() == 64);
    CHECK(f.get("general.alignment").type() == GgufType::UINT32);
    CHECK(f.data_offset() % 64 == 0);
    CHECK(f.tensor("y").offset == 64);
}

TEST_CASE("gguf: version 2 files are read", "[gguf]") {
    auto bytes = sample_writer().to_bytes();
    put<uint32_t>(bytes, 4, 2);
    GgufFile f = GgufFile::from_bytes(bytes.data(), bytes.size());
    CHECK(f.version() == 2);
    CHECK(f.tensors().size() == 2);
}

TEST_CASE("gguf: malformed files give clear errors", "[gguf]") {
    const auto good = sample_writer().to_bytes();

    SECTION("empty and bad magic") {
        expect_error({}, "truncated");
        auto b = good;
        b[0] = 'X';
        expect_error(b, "bad magic");
    }
    SECTION("bad versions") {
        auto b = good;
        put<uint32_t>(b, 4, 1);
        expect_error(b, "version 1 is not supported");
        put<uint32_t>(b, 4, 0x03000000);
        expect_error(b, "big-endian");
        put<uint32_t>(b, 4, 7);
        expect_error(b, "unsupported GGUF version 7");
    }
    SECTION("truncated at every length") {
        // Every prefix of a valid file that cuts into its last tensor's data is refused
        // with an error, never a crash (only the trailing padding may be cut).
        GgufFile full = GgufFile::from_bytes(good.data(), good.size());
        const size_t end = full.data_offset() + full.tensor("b").offset + full.tensor("b").nbytes;
        for (size_t n = 0; n < end; n += (n < 600 ? 1 : 7)) {
            std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<long>(n));
            CHECK_THROWS_AS(GgufFile::from_bytes(b.data(), b.size()), Error);
        }
    }
    SECTION("huge counts") {
        auto b = good;
        put<uint64_t>(b, 8, 1ull << 60);
        expect_error(b, "tensor count");
        b = good;
        put<uint64_t>(b, 16, 1ull << 60);
        expect_error(b, "metadata count");
    }
    SECTION("a string longer than the file") {
        auto b = good;
        put<uint64_t>(b, 24, 1ull << 40);  // length of the first key
        expect_error(b, "longer than the");
    }
    SECTION("unknown value type") {
        auto b = good;
        // first key "general.architecture" (20 bytes) then its type at 24 + 8 + 20
        put<uint32_t>(b, 52, 99);
        expect_error(b, "unknown value type 99");
    }
    SECTION("unknown tensor type id") { expect_error(one_tensor_file(77, 32, 0, 128), "unknown ggml type id 77"); }
    SECTION("removed type ids are unknown") { expect_error(one_tensor_file(4, 32, 0, 128), "unknown ggml type id 4"); }
    SECTION("tensor past the end") {
        expect_error(one_tensor_file(0, 32, 0, 100), "runs past the end");
        expect_error(one_tensor_file(0, 8, 96, 100), "runs past the end");
        expect_error(one_tensor_file(0, 8, ~0ull - 31, 100), "runs past the end");
    }
    SECTION("misaligned offset") { expect_error(one_tensor_file(0, 4, 4, 100), "not a multiple of the alignment"); }
    SECTION("ne[0] not a multiple of the block") { expect_error(one_tensor_file(8, 33, 0, 128), "not a multiple of the q8_0 block size 32"); }
    SECTION("overflowing dimension product") {
        expect_error(one_tensor_file(0, 1ull << 62, 0, 64), "overflows");
        expect_error(one_tensor_file(0, ~0ull, 0, 64), "out of range");
    }
    SECTION("bad bool") {
        GgufWriter w;
        w.set("b", GgufValue::boolean(true));
        auto b = w.to_bytes();
        b[24 + 8 + 1 + 4] = 2;  // header, key "b", value type, then the bool
        expect_error(b, "neither 0 nor 1");
    }
    SECTION("bad alignment key") {
        GgufWriter w;
        w.set("general.alignment", GgufValue::u32(48));
        expect_error(w.to_bytes(), "not a power of two");
        GgufWriter w2;
        w2.set("general.alignment", GgufValue::i32(32));
        expect_error(w2.to_bytes(), "must be u32");
    }
    SECTION("duplicate names") {
        GgufWriter w;
        w.add_tensor("t", GgmlType::F32, {8}, std::vector<uint8_t>(32));
        w.add_tensor("u", GgmlType::F32, {8}, std::vector<uint8_t>(32));
        auto d = w.to_bytes();
        // Tensor info names are "t" and "u"; rename "u" to "t".
        for (size_t i = 24; i + 1 < d.size(); ++i)
            if (d[i] == 'u' && d[i - 1] == 0 && d[i - 8] == 1) { d[i] = 't'; break; }
        expect_error(d, "duplicate tensor name 't'");
    }
    SECTION("deeply nested arrays") {
        GgufValue v = GgufValue::i32_array({1});
        for (int i = 0; i < 12; ++i) v = GgufValue::array(GgufType::ARRAY, {v});
        GgufWriter w;
        w.set("deep", v);
        expect_error(w.to_bytes(), "nested deeper");
    }
}

TEST_CASE("gguf: files on disk are mapped and checked", "[gguf]") {
    const auto dir = std::filesystem::temp_directory_path() / "strata_test_gguf";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "m.gguf").string();
    sample_writer().write(path);
    GgufFile f = GgufFile::open(path);
    CHECK(f.path() == path);
    CHECK(f.tensors().size() == 2);
    CHECK_THROWS_WITH(GgufFile::open((dir / "missing.gguf").string()), Catch::Contains("cannot open"));
    CHECK_THROWS_WITH(GgufFile::open(dir.string()), Catch::Contains("not a regular file"));
    { std::ofstream(dir / "empty.gguf"); }
    CHECK_THROWS_WITH(GgufFile::open((dir / "empty.gguf").string()), Catch::Contains("empty file"));
    std::filesystem::resize_file(path, f.data_offset() + 40);  // cuts into tensor "b"
    CHECK_THROWS_WITH(GgufFile::open(path), Catch::Contains("runs past the end") && Catch::Contains(path));
    std::filesystem::remove_all(dir);
}

TEST_CASE("gguf: writer refuses inconsistent tensors", "[gguf]") {
    GgufWriter w;
    CHECK_THROWS_WITH(w.add_tensor("a", GgmlType::F32, {4}, std::vector<uint8_t>(15)), Catch::Contains("data bytes"));
    CHECK_THROWS_WITH(w.add_tensor("a", GgmlType::Q8_0, {31}, std::vector<uint8_t>(34)), Catch::Contains("block"));
    CHECK_THROWS_WITH(w.add_tensor("a", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), Catch::Contains("dims"));
    w.add_tensor("a", GgmlType::F32, {1}, std::vector<uint8_t>(4));
    CHECK_THROWS_WITH(w.add_tensor("a", GgmlType::F32, {1}, std::vector<uint8_t>(4)), Catch::Contains("duplicate"));
    CHECK_THROWS(GgufWriter(12));
}
