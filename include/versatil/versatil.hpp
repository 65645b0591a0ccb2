// The versatil core: backend policies, Quantizer<Targets...>, run-time composition, scoped
// environments and quantization math. Header-only; needs Boost.Hana and the standard
// library only; builds for bare metal (no exceptions, no RTTI).
#pragma once

#include "versatil/backends/catalogue.hpp"
#include "versatil/backends/cortex_m.hpp"
#include "versatil/backends/x86_inductor.hpp"
#include "versatil/backends/xnnpack.hpp"
#include "versatil/core/backend.hpp"
#include "versatil/core/composition.hpp"
#include "versatil/core/device.hpp"
#include "versatil/core/module_path.hpp"
#include "versatil/core/quantization_config.hpp"
#include "versatil/core/quantizer.hpp"
#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/core/target.hpp"
#include "versatil/environment/scoped_environment.hpp"
#include "versatil/math/qparams.hpp"
#include "versatil/math/quantize.hpp"
#include "versatil/math/requantize.hpp"
#include "versatil/version.hpp"
