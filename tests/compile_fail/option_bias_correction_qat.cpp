// expect-error: versatil: options 'bias_correction' and 'qat' do not combine
// expect-error: check_option_combination<versatil::fixed_string<11>\{"X86Inductor"\}, true, false, true, 0, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(X86Inductor<bias_correction, qat, cle>::is_qat);
