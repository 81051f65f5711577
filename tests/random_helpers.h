// Random test data shared by the kernel and quantization tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace strata::test {

// n values from N(0, scale^2), the same for the same seed.
inline std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> x(n);
    for (float& v : x) v = g(rng);
    return x;
}

}  // namespace strata::test
