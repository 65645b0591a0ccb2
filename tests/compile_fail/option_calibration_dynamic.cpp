// expect-error: versatil: options 'calibration' and 'dynamic' do not combine
// expect-error: check_option_combination<versatil::fixed_string<7>\{"XNNPACK"\}, false, true, false, 1, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(XNNPACK<dynamic, calibration<calibration_method::automatic>>::is_dynamic);
