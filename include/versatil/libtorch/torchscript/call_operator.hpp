// A LibTorch operator called by its schema name (quantized::linear_prepack, ...), for the ops
// with no C++ function in LibTorch's public API: packing weights, the quantized cells of
// recurrent layers, unpacking a lowered model's parameters.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>

namespace versatil::libtorch {

// The stack the operator leaves: its outputs, in order.
inline ::torch::jit::Stack call_operator(const char* name, ::torch::jit::Stack arguments) {
    c10::Dispatcher::singleton().findSchemaOrThrow(name, "").callBoxed(&arguments);
    return arguments;
}

}  // namespace versatil::libtorch
