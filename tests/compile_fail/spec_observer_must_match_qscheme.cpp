// expect-error: versatil::spec_rules::observer_must_match_qscheme\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.observer = observer_kind::per_channel_min_max});
