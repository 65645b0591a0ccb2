// expect-error: versatil::Quantizer: no target quantizes anything
// expect-error: Exclude<versatil::fixed_string<4>\{"head"\}>
#include "versatil/versatil.hpp"
using namespace versatil;
static_assert(!Quantizer<Exclude<"head">>::is_dynamic);
