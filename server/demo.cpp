#include "server/demo.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/synth/model_writer.h"

namespace strata::server {

namespace fs = std::filesystem;

std::string demo_model_path() {
    const passwd* pw = getpwuid(getuid());
    const fs::path home = pw && pw->pw_dir ? fs::path(pw->pw_dir) : fs::temp_directory_path();
    return (home / ".cache" / "strata" / "demo-qwen3next-small-q8_0-mtp.gguf").string();
}

void ensure_demo_model(const std::string& path, const std::function<void(const std::string&)>& progress) {
    if (fs::exists(path)) {
        progress(fmt::format("demo model: {} (cached)", path));
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    progress(fmt::format("demo model: generating {} (qwen3next small +mtp q8_0 seed 1, random weights)", path));
    synth::SynthOptions o;
    o.arch = synth::Arch::Qwen3Next;
    o.preset = synth::Preset::Small;
    o.type = GgmlType::Q8_0;
    o.seed = 1;
    o.mtp = true;
    fs::create_directories(fs::path(path).parent_path());
    // A temp name unique to this process, renamed into place: a concurrent or
    // interrupted run never leaves a half-written model under the final name.
    const std::string tmp = fmt::format("{}.tmp.{}", path, getpid());
    try {
        synth::make_writer(synth::build_model(o)).write(tmp);
        fs::rename(tmp, path);
    } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);
        throw;
    }
    progress(fmt::format("demo model: written in {:.1f} s",
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
}

}  // namespace strata::server
