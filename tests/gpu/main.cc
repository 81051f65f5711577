// The Catch2 main of strata_gpu_tests (its test files build with the GPU toolchain).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
