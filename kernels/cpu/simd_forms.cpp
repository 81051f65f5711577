#include "kernels/cpu/simd_forms.h"

#include <atomic>

#include "engine/core/error.h"

namespace strata::simd {
namespace {

std::atomic<int> g_forced{0};

int widest() {
    static const int bits = [] {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("x86-64-v4")) return 512;
        if (__builtin_cpu_supports("x86-64-v3")) return 256;
        return 128;
    }();
    return bits;
}

}  // namespace

bool runs_vector_bits(int bits) { return (bits == 512 || bits == 256 || bits == 128) && bits <= widest(); }

int vector_bits() {
    const int f = g_forced.load(std::memory_order_relaxed);
    return f ? f : widest();
}

void force_vector_bits(int bits) {
    STRATA_CHECK(bits == 0 || runs_vector_bits(bits), "simd::force_vector_bits: {}-bit vectors: this CPU runs {} at most",
                 bits, widest());
    g_forced.store(bits, std::memory_order_relaxed);
}

}  // namespace strata::simd
