// The int8 scheme CMSIS-NN and TensorFlow Lite Micro run on Cortex-M, as a constexpr function.
// Activations and weights are XNNPACK's static scheme (the same int8 scheme): int8 per-tensor
// affine activations -128..127 (histogram), int8 symmetric weights -127..127 with zero point 0,
// per-channel on axis 0 unless per_tensor. Biases are int32 with a derived scale (input_scale
// * weight_scale, per output channel with per-channel weights), so every rescale is an integer
// fixed-point multiplier and shift (math/requantize.hpp). QAT swaps observers for fake-quantize
// with moving-average observers. No dynamic variant: the device computes no scale at run time.
#pragma once

#include <cstdint>
#include <limits>

#include "versatil/backends/xnnpack_config.hpp"
#include "versatil/core/quantization_config.hpp"

namespace versatil {

consteval quantization_config cortex_m_config(bool qat, bool per_channel) {
    quantization_config config = xnnpack_config(/*dynamic=*/false, qat, per_channel);
    config.bias = checked({
        .dtype = dtype::int32,
        .quant_min = std::numeric_limits<std::int32_t>::min(),
        .quant_max = std::numeric_limits<std::int32_t>::max(),
        .qscheme = per_channel ? qscheme::per_channel_symmetric : qscheme::per_tensor_symmetric,
        .ch_axis = per_channel ? 0 : no_channel_axis,
        .observer = observer_kind::derived,
    });
    return config;
}

}  // namespace versatil
