// Every kernel of the firmware runtime behind a function of its own that the compiler may not
// inline, for check_stack.py: compiled for the Cortex-M4 with -fstack-usage and
// -fcallgraph-info=su, the deepest call chain from probe_<kernel> is that kernel's stack,
// inlined or not (the probe's own frame is counted too: a bound, not an underestimate).
#include <cstdint>

#include "versatil/firmware/firmware.hpp"

namespace fw = versatil::firmware;

#define VERSATIL_STACK_PROBE(kernel, params, ...)                                                          \
    extern "C" __attribute__((noinline, used)) void probe_##kernel(const fw::params& p, const std::int8_t* in, \
                                                                   const std::int8_t* in2, std::int8_t* out,  \
                                                                   std::int8_t* scratch) noexcept {           \
        (void)in2;                                                                                           \
        (void)scratch;                                                                                       \
        fw::kernel(__VA_ARGS__);                                                                             \
    }

VERSATIL_STACK_PROBE(conv2d, conv2d_params, p, in, out)
VERSATIL_STACK_PROBE(conv2d_im2col, conv2d_params, p, in, out, scratch)
VERSATIL_STACK_PROBE(depthwise_conv2d_3x3, conv2d_params, p, in, out, scratch)
VERSATIL_STACK_PROBE(linear, linear_params, p, in, out)
VERSATIL_STACK_PROBE(linear_blocked, linear_params, p, in, out)
VERSATIL_STACK_PROBE(add, add_params, p, in, in2, out)
VERSATIL_STACK_PROBE(clamp, clamp_params, p, in, out)
VERSATIL_STACK_PROBE(max_pool2d, max_pool2d_params, p, in, out)
VERSATIL_STACK_PROBE(avg_pool2d, avg_pool2d_params, p, in, out)
VERSATIL_STACK_PROBE(lookup, lookup_params, p, in, out)
VERSATIL_STACK_PROBE(mul, mul_params, p, in, in2, out)
VERSATIL_STACK_PROBE(softmax, softmax_params, p, in, out)
VERSATIL_STACK_PROBE(concat, concat_params, p, &in, out)
VERSATIL_STACK_PROBE(permute, permute_params, p, in, out)
VERSATIL_STACK_PROBE(pad, pad_params, p, in, out)
