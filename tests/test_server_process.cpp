// The strata-server executable: usage errors, --help, and a real process that
// serves on a free port and exits cleanly on SIGTERM.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "engine/synth/model_writer.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace strata;

namespace {

const std::string kServer = std::string(STRATA_BIN_DIR) + "/strata-server";

struct TmpDir {
    fs::path path = fs::temp_directory_path() / ("strata_test_server_" + std::to_string(getpid()));
    TmpDir() { fs::create_directories(path); }
    ~TmpDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// Bounded: a server that fails to exit is killed after 20 s (exit code 137).
int exit_code(const std::string& args) {
    const int st = std::system(("timeout -s KILL 20 " + kServer + " " + args + " >/dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The child's status within `limit`, else kills it and returns -1.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -2;
        std::this_thread::sleep_for(20ms);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

}  // namespace

TEST_CASE("strata-server: usage errors exit 2, --help 0", "[server][process]") {
    CHECK(exit_code("--help") == 0);
    CHECK(exit_code("") == 2);                              // neither -m nor --demo
    CHECK(exit_code("-m x.gguf --demo") == 2);
    CHECK(exit_code("-m x.gguf --port 70000") == 2);
    CHECK(exit_code("-m x.gguf --parallel 0") == 2);
    CHECK(exit_code("-m x.gguf --api-key a --api-key-file b") == 2);
    CHECK(exit_code("-m x.gguf --api-key-file /nonexistent/key") == 2);
    CHECK(exit_code("-m x.gguf --frobnicate") == 2);
    CHECK(exit_code("-m /nonexistent/model.gguf --port 0") == 1);  // load fails: exit 1, no hang
}

TEST_CASE("strata-server: serves on a free port and exits 0 on SIGTERM", "[server][process]") {
    const TmpDir tmp;
    const std::string model = (tmp.path / "tiny.gguf").string(), log = (tmp.path / "server.log").string();
    synth::SynthOptions o;
    o.arch = synth::Arch::Llama;
    o.type = GgmlType::Q8_0;
    o.seed = 2;
    synth::make_writer(synth::build_model(o)).write(model);
    { std::ofstream(tmp.path / "key") << "k3y\n"; }

    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        const std::string keyfile = (tmp.path / "key").string();
        execl(kServer.c_str(), kServer.c_str(), "-m", model.c_str(), "--port", "0", "-t", "1", "-c", "256",
              "--api-key-file", keyfile.c_str(), "--grace-ms", "2000", static_cast<char*>(nullptr));
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 500 && port == 0; ++i) {  // 10 s
        std::ifstream in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        std::smatch m;
        const std::string text = ss.str();
        // "ready: serving" is logged once the engine is set; the loader's own progress line
        // ("load: ready: ...") comes before, when /health still answers 503 (loading).
        if (text.find("ready: serving") != std::string::npos &&
            std::regex_search(text, m, std::regex("listening on http://[0-9.]+:([0-9]+)")))
            port = std::stoi(m[1]);
        else std::this_thread::sleep_for(20ms);
    }
    REQUIRE(port > 0);
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(10);
    auto h = cli.Get("/health");
    REQUIRE(h);
    CHECK(h->status == 200);
    auto denied = cli.Get("/v1/models");
    REQUIRE(denied);
    CHECK(denied->status == 401);
    auto r = cli.Post("/v1/completions", {{"Authorization", "Bearer k3y"}}, R"({"prompt":"Hi","max_tokens":4})",
                      "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    kill(pid, SIGTERM);
    CHECK(wait_exit(pid, 10s) == 0);
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    CHECK_THAT(ss.str(), Catch::Contains("POST /v1/completions 200") && Catch::Contains("stopped"));
}
