// Deterministic random numbers for synthetic models. Everything here is our own
// code (no <random> distributions) so the same seed gives the same bytes with any
// standard library: std::normal_distribution's algorithm is unspecified and differs
// between libstdc++ and libc++.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace strata::synth {

// SplitMix64: used to expand one 64-bit seed into well-mixed state words.
inline uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// FNV-1a over the bytes of a name; stable across platforms.
inline uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001B3ull;
    }
    return h;
}

// Seed of one tensor: depends only on (model seed, tensor name), never on the order
// or the thread that generates it, so parallel generation is byte-identical.
inline uint64_t tensor_seed(uint64_t seed, std::string_view name) {
    uint64_t s = seed ^ fnv1a64(name);
    return splitmix64(s);
}

// xoshiro256** (Blackman & Vigna), seeded through SplitMix64 as its authors advise.
class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto& w : s_) w = splitmix64(seed);
    }

    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    // Uniform in (0, 1]: safe to take the log of.
    double uniform_pos() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

    // Standard normal by the basic Box-Muller transform; the second value of each
    // pair is kept for the next call. Computed in double and only then rounded, so
    // the last-ulp behaviour of libm's log/cos/sin cannot reach a float weight
    // except in rare rounding ties.
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double r = std::sqrt(-2.0 * std::log(uniform_pos()));
        const double theta = 2.0 * 3.14159265358979323846 * uniform();
        spare_ = r * std::sin(theta);
        has_spare_ = true;
        return r * std::cos(theta);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
    double spare_ = 0.0;
    bool has_spare_ = false;
};

}  // namespace strata::synth
