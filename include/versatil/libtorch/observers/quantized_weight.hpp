// A weight quantized as convert quantizes it, for the paths that quantize weights without
// observers in the graph (the direct dynamic path, recurrent layers).
#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <cstdint>

#include "versatil/libtorch/observers/observers.hpp"

namespace versatil::libtorch {

// Quantized with the qparams its observer computes (its spec's kind: per channel or per tensor),
// scales in float32 and zero points in int32 as InsertQuantDeQuant stores them.
inline at::Tensor quantized_weight(const at::Tensor& weight, const quantization_spec& spec) {
    ::torch::jit::Module observer = make_observer(spec);
    // Two calls of each method: optimizing them would cost more than it saves, and a process's
    // first optimization costs some 40 ms of LibTorch's own set-up.
    const ::torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
    observer.forward({weight});
    const auto qparams = observer.run_method("calculate_qparams").toTuple();
    const at::Tensor scale = qparams->elements()[0].toTensor().to(at::kFloat);
    const at::Tensor zero_point = qparams->elements()[1].toTensor().to(at::kInt);
    const c10::ScalarType dtype = detail::quantized_scalar_type(spec.dtype);
    if (is_per_channel(spec.qscheme)) return at::quantize_per_channel(weight, scale, zero_point, spec.ch_axis, dtype);
    return at::quantize_per_tensor(weight, scale.item<double>(), zero_point.item<std::int64_t>(), dtype);
}

}  // namespace versatil::libtorch
