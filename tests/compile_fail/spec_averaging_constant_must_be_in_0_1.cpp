// expect-error: versatil::spec_rules::averaging_constant_must_be_in_0_1\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.averaging_constant = 1.5F});
