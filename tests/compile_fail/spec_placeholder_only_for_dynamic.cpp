// expect-error: versatil::spec_rules::placeholder_only_for_dynamic\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.observer = observer_kind::placeholder});
