// The built-in demo model of `strata-server --demo`: a synthetic qwen3next (small
// preset, MTP head, q8_0, seed 1; random weights, so its text is gibberish), made
// once with engine/synth and cached.
#pragma once
#include <functional>
#include <string>

namespace strata::server {

// ~/.cache/strata/demo-qwen3next-small-q8_0-mtp.gguf (home from the password database).
std::string demo_model_path();
// Writes the demo model to `path` unless it exists (atomically: a temp file renamed).
void ensure_demo_model(const std::string& path, const std::function<void(const std::string&)>& progress);

}  // namespace strata::server
