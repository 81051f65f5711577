// The `strata` CLI end to end: exit codes and messages for bad input, inspect's
// outputs, and run/eval/tokenize on a tiny synthetic model.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/gguf/reader.h"
#include "engine/quant/quant.h"

namespace fs = std::filesystem;

namespace {

struct Result {
    int code;
    std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
    const std::string cmd = std::string(STRATA_BIN_DIR) + "/strata " + args + " 2>&1";
    std::FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// One folder per process (ctest runs the test cases in parallel processes), removed
// when the process exits.
struct TmpDir {
    fs::path path = fs::temp_directory_path() / ("strata_test_cli_" + std::to_string(getpid()));
    TmpDir() { fs::create_directories(path); }
    ~TmpDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

const fs::path& tmp_dir() {
    static const TmpDir d;
    return d.path;
}

// A tiny llama model made once for all the tests here.
const std::string& tiny_model() {
    static const std::string path = [] {
        const std::string p = (tmp_dir() / "tiny.gguf").string();
        const Result r = run("make-model --arch llama --preset tiny --type q8_0 --seed 5 --out " + p);
        REQUIRE(r.code == 0);
        return p;
    }();
    return path;
}

}  // namespace

TEST_CASE("cli: usage errors exit 2, failures exit 1 with one clear line", "[cli]") {
    CHECK(run("").code == 2);
    CHECK(run("frobnicate").code == 2);
    CHECK(run("--help").code == 0);
    Result r = run("inspect");
    CHECK(r.code == 2);
    r = run("inspect /nonexistent/model.gguf");
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("cannot open"));
    const std::string bad = (tmp_dir() / "bad.gguf").string();
    { std::ofstream(bad) << "definitely not a model"; }
    r = run("inspect " + bad);
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("bad magic") && Catch::Contains(bad));
    r = run("run -p hi");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("-m MODEL"));
    r = run("run -m " + tiny_model() + " -p hi --temp abc");
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("--temp expects a number"));
    r = run("run -m " + tiny_model() + " -p 'a long prompt that will not fit' -c 4");
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("context holds 4"));
    r = run("eval -m " + tiny_model() + " --tokens 1,99999");
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("out of range"));
    r = run("run -m " + tiny_model() + " -p hi --cache-type q5_1");
    CHECK(r.code == 2);
}

TEST_CASE("cli: inspect prints the table, JSON, and dumps tensors", "[cli]") {
    Result r = run("inspect " + tiny_model());
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("general.architecture") && Catch::Contains("blk.0.attn_q.weight") &&
                          Catch::Contains("q8_0"));
    r = run("inspect --json " + tiny_model());
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["metadata"]["general.architecture"] == "llama");
    CHECK(j["metadata"]["tokenizer.ggml.tokens"]["count"].get<int>() > 256);
    const strata::GgufFile f = strata::GgufFile::open(tiny_model());
    CHECK(j["tensors"].size() == f.tensors().size());

    const std::string out = (tmp_dir() / "q.f32").string();
    r = run("inspect " + tiny_model() + " --dump blk.0.attn_q.weight --out " + out);
    REQUIRE(r.code == 0);
    const auto& t = f.tensor("blk.0.attn_q.weight");
    std::vector<float> want(static_cast<size_t>(t.n_elements()));
    strata::dequantize_row(t.type, t.data, want.data(), t.n_elements());
    std::ifstream in(out, std::ios::binary);
    std::vector<float> got(want.size());
    in.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
    CHECK(in.gcount() == static_cast<std::streamsize>(got.size() * sizeof(float)));
    CHECK(got == want);
    CHECK(run("inspect " + tiny_model() + " --dump nope --out " + out).code == 1);
}

TEST_CASE("cli: run, eval and tokenize work on a tiny model", "[cli]") {
    Result r = run("run -m " + tiny_model() + " -p 'Hello world' -n 8 -t 2");
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("prompt: ") && Catch::Contains("decode: ") && Catch::Contains("tok/s"));
    Result again = run("run -m " + tiny_model() + " -p 'Hello world' -n 8 -t 1");
    CHECK(again.out.substr(0, again.out.find("prompt:")) == r.out.substr(0, r.out.find("prompt:")));
    r = run("run -m " + tiny_model() + " -p 'Hello' -n 4 --chat --temp 0.7 --seed 3");
    CHECK(r.code == 0);
    r = run("eval -m " + tiny_model() + " -p 'Hello world' --top 3 --json");
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.size() == 1);
    CHECK(j[0]["top"].size() == 3);
    r = run("tokenize -m " + tiny_model() + " 'Hello world'");
    REQUIRE(r.code == 0);
    std::string ids = r.out;
    ids.erase(ids.find_last_not_of("\n") + 1);
    r = run("detokenize -m " + tiny_model() + " " + ids);
    REQUIRE(r.code == 0);
    CHECK(r.out == "Hello world\n");
}

TEST_CASE("cli: budgets, streaming and host experts from the command line", "[cli][placement]") {
    const std::string base = "run -m " + tiny_model() + " -p 'Hello world' -n 8 -t 1 --temp 0";
    const Result plain = run(base);
    REQUIRE(plain.code == 0);
    const std::string text = plain.out.substr(0, plain.out.find("prompt:"));
    // Usage errors: exit 2 with one line.
    for (const char* bad : {"--stream-layers", "--layer-prefetch-depth 0", "--max-vram cpu:0", "--max-vram cpu:0=lots",
                            "--max-vram cpu:0=1 --layer-prefetch-depth 2", "--moe-cache-mib 4", "--cpu-moe --n-cpu-moe 2"}) {
        const Result r = run(base + " " + bad);
        INFO(bad << ": " << r.out);
        CHECK(r.code == 2);
    }
    // Failures: exit 1 naming what is missing.
    Result r = run(base + " --max-vram cpu:0=1MiB --stream-layers");
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("too small") && Catch::Contains("at least"));
    r = run(base + " --max-vram cpu:3=1GiB");
    CHECK(r.code == 1);
    CHECK_THAT(r.out, Catch::Contains("runs no stage"));
    // A budget that holds everything, and the smallest one (every layer streamed through
    // one slot): the same text, the plan and the copies reported.
    r = run(base + " --max-vram cpu:0=1GiB");
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(text) && Catch::Contains("layers resident") && Catch::Contains("device peak"));
    const Result small = run(base + " --max-vram cpu:0=1MiB --stream-layers --layer-prefetch-depth 0");
    const size_t at = small.out.find("at least ");
    REQUIRE(at != std::string::npos);
    const double need = std::stod(small.out.substr(at + 9));
    r = run(base + " --stream-layers --layer-prefetch-depth 0 --max-vram cpu:0=" + std::to_string(need + 0.1) + "MiB");
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(text) && Catch::Contains("0 layers resident") && Catch::Contains("streaming: "));
}

TEST_CASE("cli: docs/flags.md is what the code declares", "[cli]") {
    const Result r = run("flags-doc");
    REQUIRE(r.code == 0);
    const fs::path doc = fs::path(__FILE__).parent_path().parent_path() / "docs" / "flags.md";
    std::ifstream in(doc);
    std::stringstream ss;
    ss << in.rdbuf();
    INFO("regenerate with: build/bin/strata flags-doc > docs/flags.md");
    CHECK(ss.str() == r.out);
}

TEST_CASE("cli: an MTP block written apart drafts as the one-file model (make-model --mtp-out, --mtp-model)",
          "[cli][mtp]") {
    const std::string whole = (tmp_dir() / "q35.gguf").string(), main = (tmp_dir() / "q35-main.gguf").string(),
                      side = (tmp_dir() / "mtp-q35-main.gguf").string();
    const std::string make = "make-model --arch qwen35 --preset tiny --type q8_0 --seed 3 --mtp-agree 0.9 --out ";
    REQUIRE(run(make + whole).code == 0);
    REQUIRE(run(make + main + " --mtp-out " + side).code == 0);
    CHECK(run("make-model --arch qwen35 --out " + main + ".x --mtp-out " + side + ".x").code == 2);
    // Text and speculation statistics, without the timings.
    const auto spec_run = [](const std::string& files, const std::string& more = "") {
        const Result r = run("run -m " + files + " -p 'Hello' -n 24 -t 2 --temp 0 --spec-draft 3 " + more);
        INFO(r.out);
        REQUIRE(r.code == 0);
        const size_t spec = r.out.find("speculative:");
        REQUIRE(spec != std::string::npos);
        return r.out.substr(0, r.out.find("prompt:")) + r.out.substr(spec, r.out.find(" tokens/window", spec) - spec);
    };
    const std::string expect = spec_run(whole);
    CHECK_THAT(expect, Catch::Contains("accepted") && !Catch::Contains(" 0 accepted"));
    CHECK(spec_run(main + " --mtp-model " + side) == expect);
    CHECK(spec_run(main + " --mtp-model " + side, "--devices cpu:0,cpu:1") == expect);
    // Without its MTP file the model decodes plainly; with one it already has, exit 1 naming why.
    const Result plain = run("run -m " + main + " -p 'Hello' -n 24 -t 2 --temp 0 --spec-draft 3");
    CHECK_THAT(plain.out, Catch::Contains("the model has no MTP head") &&
                              Catch::Contains(expect.substr(0, expect.find("speculative:"))));
    const Result twice = run("run -m " + whole + " --mtp-model " + side + " -p 'Hello' -n 4");
    CHECK(twice.code == 1);
    CHECK_THAT(twice.out, Catch::Contains("already holds an MTP block"));
}
