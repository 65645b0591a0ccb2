// expect: compiles
// The control case of lowering_missing.cpp: the same header and call with a backend that has a
// LibTorch lowering, under the same flags, so its rejection is the rule's and not the flags'.
#include "versatil/libtorch/plan/backend_lowering.hpp"
using namespace versatil;
auto quantizer = libtorch::to_runtime(Quantizer<Target<"", XNNPACK<>>>{});
