// expect-error: versatil::spec_rules::range_must_fit_dtype\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.dtype = dtype::int8, .quant_min = -129, .quant_max = 127});
