// The one list of STRATA_* environment variables: every layer's declarations, in one
// place for `strata flags-doc` (docs/flags.md).
#pragma once
#include <string>
#include <vector>

#include "engine/core/env.h"

namespace strata {

std::vector<EnvSpec> env_specs();
std::string env_markdown();

}  // namespace strata
