// expect-error: versatil: options 'bias_correction' and 'dynamic' do not combine
// expect-error: check_option_combination<versatil::fixed_string<7>\{"XNNPACK"\}, true, true, false, 0, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(XNNPACK<dynamic, bias_correction>::is_dynamic);
