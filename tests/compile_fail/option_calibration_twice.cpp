// expect-error: versatil: more than one 'calibration' option: a policy calibrates its activations with one method
// expect-error: check_option_combination<versatil::fixed_string<11>\{"X86Inductor"\}, false, false, false, 2, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!X86Inductor<calibration<calibration_method::entropy>, calibration<calibration_method::minmax>>::is_dynamic);
