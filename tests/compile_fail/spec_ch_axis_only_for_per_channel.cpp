// expect-error: versatil::spec_rules::ch_axis_only_for_per_channel\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.ch_axis = 1});
