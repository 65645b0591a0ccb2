// expect-error: versatil::spec_rules::eps_must_be_positive\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.eps = 0.0F});
