// expect-error: versatil::spec_rules::per_channel_needs_ch_axis\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.qscheme = qscheme::per_channel_symmetric, .observer = observer_kind::per_channel_min_max});
