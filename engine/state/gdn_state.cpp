#include "engine/state/gdn_state.h"

#include "engine/core/error.h"

namespace strata {

GdnState::GdnState(const Allocator& alloc, int64_t n_layers, int64_t conv_kernel, int64_t conv_dim, int64_t nv,
                   int64_t dk, int64_t dv)
    : n_layers_(n_layers), conv_rows_(conv_kernel - 1), conv_dim_(conv_dim), nv_(nv), dk_(dk), dv_(dv) {
    STRATA_CHECK(n_layers >= 0 && conv_kernel >= 1 && conv_dim > 0 && nv > 0 && dk > 0 && dv > 0,
                 "bad GDN state dims: layers {} K {} conv_dim {} nv {} dk {} dv {}", n_layers, conv_kernel,
                 conv_dim, nv, dk, dv);
    mem_ = alloc(sizeof(float) * static_cast<size_t>(n_layers * (conv_size() + ssm_size())));  // zeroed
}

}  // namespace strata
