#include "engine/state/gdn_state.h"

#include <algorithm>

#include "engine/core/error.h"

namespace strata {

GdnState::GdnState(int64_t n_layers, int64_t conv_kernel, int64_t conv_dim, int64_t nv, int64_t dk, int64_t dv)
    : n_layers_(n_layers), conv_rows_(conv_kernel - 1), conv_dim_(conv_dim), nv_(nv), dk_(dk), dv_(dv) {
    STRATA_CHECK(n_layers >= 0 && conv_kernel >= 1 && conv_dim > 0 && nv > 0 && dk > 0 && dv > 0,
                 "bad GDN state dims: layers {} K {} conv_dim {} nv {} dk {} dv {}", n_layers, conv_kernel,
                 conv_dim, nv, dk, dv);
    conv_.assign(static_cast<size_t>(n_layers * conv_size()), 0.0f);
    ssm_.assign(static_cast<size_t>(n_layers * ssm_size()), 0.0f);
}

void GdnState::clear() {
    std::fill(conv_.begin(), conv_.end(), 0.0f);
    std::fill(ssm_.begin(), ssm_.end(), 0.0f);
}

}  // namespace strata
