// expect-error: versatil: options 'calibration' and 'qat' do not combine
// expect-error: check_option_combination<versatil::fixed_string<7>\{"CortexM"\}, false, false, true, 1, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(CortexM<qat, calibration<calibration_method::percentile>>::is_qat);
