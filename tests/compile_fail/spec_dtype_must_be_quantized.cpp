// expect-error: versatil::spec_rules::dtype_must_be_quantized\(\)
#include "versatil/core/quantization_spec.hpp"
using namespace versatil;
constexpr quantization_spec spec = checked({.dtype = dtype::float32});
