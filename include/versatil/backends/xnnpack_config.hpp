// torchao's get_symmetric_quantization_config as a constexpr function: int8 per-tensor
// affine activations -128..127 (histogram; placeholder when dynamic, and then no output
// spec), int8 symmetric weights -127..127, per-channel on axis 0 unless per_tensor, float
// bias, eps 2^-12. QAT swaps observers for fake-quantize with moving-average observers.
//
// One deliberate difference: torchao writes ch_axis=0 on per-tensor weight specs too, where
// it is ignored; here ch_axis is only set for per-channel schemes (a checked invariant).
#pragma once

#include <optional>

#include "versatil/core/quantization_config.hpp"

namespace versatil {

consteval quantization_config xnnpack_config(bool dynamic, bool qat, bool per_channel) {
    const quantization_spec activation = checked({
        .dtype = dtype::int8,
        .quant_min = -128,
        .quant_max = 127,
        .qscheme = qscheme::per_tensor_affine,
        .ch_axis = no_channel_axis,
        .observer = qat ? observer_kind::moving_average_min_max
                        : (dynamic ? observer_kind::placeholder : observer_kind::histogram),
        .is_fake_quantize = qat,
        .averaging_constant = qat && dynamic ? 1.0F : default_averaging_constant,
        .is_dynamic = dynamic,
    });
    const observer_kind weight_observer =
        qat ? (per_channel ? observer_kind::moving_average_per_channel_min_max : observer_kind::moving_average_min_max)
            : (per_channel ? observer_kind::per_channel_min_max : observer_kind::min_max);
    const quantization_spec weight = checked({
        .dtype = dtype::int8,
        .quant_min = -127,
        .quant_max = 127,
        .qscheme = per_channel ? qscheme::per_channel_symmetric : qscheme::per_tensor_symmetric,
        .ch_axis = per_channel ? 0 : no_channel_axis,
        .observer = weight_observer,
        .is_fake_quantize = qat,
    });
    if (dynamic) return {activation, std::nullopt, weight, std::nullopt, qat};
    return {activation, activation, weight, std::nullopt, qat};
}

}  // namespace versatil
