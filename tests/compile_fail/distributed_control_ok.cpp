// expect: compiles
// The control case of distributed_needs_use_c10d_gloo.cpp: the same header with USE_C10D_GLOO
// defined (as the meson dependency versatil-libtorch-distributed does) compiles under the same
// flags, so that case fails for the macro alone.
#define USE_C10D_GLOO
#include "versatil/libtorch/distributed/process_group.hpp"
