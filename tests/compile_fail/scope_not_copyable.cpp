// expect-error: use of deleted function .*scoped_environment
// A scope restores once: it cannot be copied (nor moved) out of the block that owns it.
#include "versatil/versatil.hpp"
using namespace versatil;
void leak() {
    auto scope = X86Inductor<>::environment_context<null_environment>();
    auto copy = scope;
}
