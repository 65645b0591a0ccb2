// The store used when none is named: the process environment where there is one, the
// null store on bare metal.
#pragma once

#include "versatil/environment/null_environment.hpp"
#include "versatil/environment/process_environment.hpp"

namespace versatil {

#if VERSATIL_HAS_PROCESS_ENVIRONMENT
using default_environment = process_environment;
#else
using default_environment = null_environment;
#endif

}  // namespace versatil
