// expect-error: versatil: options 'gptq' and 'dynamic' do not combine
// expect-error: check_option_combination<versatil::fixed_string<11>\{"X86Inductor"\}, false, true, false, 0, true>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(X86Inductor<gptq, dynamic>::is_dynamic);
