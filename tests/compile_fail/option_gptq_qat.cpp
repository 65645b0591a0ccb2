// expect-error: versatil: options 'gptq' and 'qat' do not combine
// expect-error: check_option_combination<versatil::fixed_string<7>\{"XNNPACK"\}, false, false, true, 0, true>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(XNNPACK<qat, gptq, per_tensor>::is_qat);
