// Codebooks of the IQ1/IQ2/IQ3 formats (ggml src/ggml-common.h) and a nearest-point
// search over them for the quantizers.
//
// Grid entries pack one magnitude per byte, little-endian: byte k of entry i is the
// magnitude of value k of the group (8 values for IQ2, 4 for IQ3); IQ1's bytes are
// signed values (int8 -1, 0, 1). The tables are
// decoded at compile time from level-index digit strings (iq_grids.cpp); GridChecksum
// values computed from ggml's tables guard against transcription errors.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace strata::iq {

extern const std::array<uint64_t, 256> kIq2xxsGrid;   // levels {0x08, 0x19, 0x2b}
extern const std::array<uint64_t, 512> kIq2xsGrid;    // levels {0x08, 0x19, 0x2b}
extern const std::array<uint64_t, 1024> kIq2sGrid;    // levels {0x08, 0x19, 0x2b}
extern const std::array<uint32_t, 256> kIq3xxsGrid;   // levels {4, 12, ..., 52, 62}
extern const std::array<uint32_t, 512> kIq3sGrid;     // levels {1, 3, ..., 15}
extern const std::array<uint64_t, 2048> kIq1sGrid;    // int8 values {-1, 0, 1} (IQ1_S, IQ1_M)

// ksigns_iq2xs: a 7-bit sign index plus an 8th sign bit that makes the number of
// negative signs even (bit j set = value j of the 8-value group is negative).
constexpr uint8_t ksign(uint32_t idx7) {
    uint32_t parity = 0;
    for (uint32_t v = idx7; v != 0; v >>= 1) parity ^= v & 1u;
    return static_cast<uint8_t>((idx7 & 127u) | (parity << 7));
}
inline constexpr auto kSignsIq2xs = [] {
    std::array<uint8_t, 128> s{};
    for (uint32_t i = 0; i < 128; ++i) s[i] = ksign(i);
    return s;
}();

struct GridChecksum {
    uint64_t sum;  // wrapping sum of all entries
    uint64_t xr;   // xor of all entries
    bool operator==(const GridChecksum&) const = default;
};

template <typename U, size_t N>
constexpr GridChecksum checksum(const std::array<U, N>& grid) {
    GridChecksum c{0, 0};
    for (U v : grid) {
        c.sum += v;
        c.xr ^= v;
    }
    return c;
}

// Checksums of ggml's original tables (sum mod 2^64, xor).
inline constexpr GridChecksum kIq2xxsChecksum{0x8b267e217ce24363ull, 0x3232003211ull};
inline constexpr GridChecksum kIq2xsChecksum{0x2a14e555100396a1ull, 0x1100323211ull};
inline constexpr GridChecksum kIq2sChecksum{0x75fe5f6cc209e3f2ull, 0x2311322332323232ull};
inline constexpr GridChecksum kIq3xxsChecksum{0x193a8b433aull, 0x0a0a3222ull};
inline constexpr GridChecksum kIq3sChecksum{0xc68949e56ull, 0x0c00020eull};
inline constexpr GridChecksum kIq1sChecksum{0x69564f615572510cull, 0xff01feff0101fefeull};

// Nearest grid point search for one codebook. Every coordinate of every grid point is
// one of a few levels, so the points sit on a small lattice (3^8 or 8^4 nodes). The
// target is first snapped to its nearest lattice node; if that node is a grid point it
// is the exact answer, otherwise the node's precomputed nearest grid points are scored.
class GridSearch {
public:
    GridSearch(std::span<const uint8_t> point_bytes, int dim, std::span<const uint8_t> levels);

    int dim() const { return dim_; }
    int size() const { return static_cast<int>(pts_.size()) / dim_; }
    float max_level() const { return levels_.back(); }
    const float* point(int idx) const { return &pts_[static_cast<size_t>(idx) * dim_]; }

    // Index of the grid point nearest to t[0..dim) (in grid units, i.e. level values).
    int nearest(const float* t) const;

private:
    int dim_;
    std::vector<float> levels_;      // ascending
    std::vector<float> thresholds_;  // midpoints between consecutive levels
    std::vector<float> pts_;         // size() x dim, level values
    std::vector<int16_t> on_grid_;   // lattice node -> grid index, or -1
    std::vector<uint32_t> nb_begin_; // lattice node -> range in nb_ (CSR)
    std::vector<uint16_t> nb_;
};

// Lazily built searches (thread-safe statics); building takes a few tens of ms.
const GridSearch& iq2xxs_search();
const GridSearch& iq2xs_search();
const GridSearch& iq2s_search();
const GridSearch& iq3xxs_search();
const GridSearch& iq3s_search();
// IQ1's grid with every value plus one (levels 0, 1, 2 for -1, 0, 1): targets are passed
// shifted by one as well.
const GridSearch& iq1s_search();

}  // namespace strata::iq
