// expect-error: versatil::spec_rules::derived_only_for_int32\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.dtype = dtype::int8, .quant_min = -128, .quant_max = 127,
                                            .observer = observer_kind::derived});
