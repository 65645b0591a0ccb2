// expect-error: versatil::spec_rules::quant_min_must_be_below_quant_max\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.quant_min = 10, .quant_max = 10});
