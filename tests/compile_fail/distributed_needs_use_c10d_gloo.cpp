// expect-error: needs LibTorch's Gloo process group: define USE_C10D_GLOO
// Without USE_C10D_GLOO, LibTorch's ProcessGroupGloo.hpp is empty and every use of it would fail
// with an unrelated "not declared" error: the distributed headers say what to define instead.
#include "versatil/libtorch/distributed/process_group.hpp"
