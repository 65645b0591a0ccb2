// expect-error: versatil: options 'adaround' and 'gptq' do not combine
// expect-error: check_adaround_combination<versatil::fixed_string<11>\{"X86Inductor"\}, true, true, false, false>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(X86Inductor<adaround, gptq>::config.adaround);
