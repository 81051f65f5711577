// The weight types the GPU kernels take, and the step from a type known at run time to a
// kernel template: dispatch_quant(t, f) calls f.template operator()<T>() for T == t.
#pragma once
#include "engine/quant/types.h"

#define STRATA_GPU_QUANT_TYPES(X)                                                                             \
    X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) X(Q8_K) X(IQ4_NL) X(IQ4_XS) \
        X(IQ3_XXS) X(IQ3_S) X(IQ2_XXS) X(IQ2_XS) X(IQ2_S) X(IQ1_S) X(IQ1_M)
#define STRATA_GPU_FLOAT_TYPES(X) X(F32) X(F16) X(BF16)

namespace strata::gpu {

#define STRATA_GPU_DISPATCH_CASE(X)           \
    case GgmlType::X:                         \
        f.template operator()<GgmlType::X>(); \
        return true;

template <typename F>
bool dispatch_quant(GgmlType t, F&& f) {
    switch (t) {
        STRATA_GPU_QUANT_TYPES(STRATA_GPU_DISPATCH_CASE)
        default:
            return false;
    }
}

// Quantized and float weights.
template <typename F>
bool dispatch_weight(GgmlType t, F&& f) {
    switch (t) {
        STRATA_GPU_FLOAT_TYPES(STRATA_GPU_DISPATCH_CASE)
        default:
            return dispatch_quant(t, f);
    }
}

#undef STRATA_GPU_DISPATCH_CASE

struct NoKernel {  // for asking whether a type dispatches
    template <GgmlType T>
    void operator()() const {}
};

}  // namespace strata::gpu
