// Logging goes through spdlog's default logger, which init_logging() points at stderr
// so that stdout carries only a command's output (generated text, JSON).
#pragma once

namespace strata {

void init_logging();

}  // namespace strata
