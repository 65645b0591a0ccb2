// torchao's get_default_x86_inductor_quantization_config as a constexpr function:
// uint8 per-tensor affine activations (histogram; placeholder when dynamic; 0..127 with
// reduce_range), int8 per-channel symmetric weights on axis 0, float bias, eps 2^-12.
// QAT swaps observers for fake-quantize with moving-average observers.
#pragma once

#include <optional>

#include "versatil/core/quantization_config.hpp"

namespace versatil {

consteval quantization_config x86_inductor_config(bool dynamic, bool qat, bool reduce_range) {
    const quantization_spec activation = checked({
        .dtype = dtype::uint8,
        .quant_min = 0,
        .quant_max = reduce_range ? 127 : 255,
        .qscheme = qscheme::per_tensor_affine,
        .ch_axis = no_channel_axis,
        .observer = qat ? observer_kind::moving_average_min_max
                        : (dynamic ? observer_kind::placeholder : observer_kind::histogram),
        .is_fake_quantize = qat,
        // dynamic QAT observes each batch afresh (torchao: averaging_constant=1)
        .averaging_constant = qat && dynamic ? 1.0F : default_averaging_constant,
        .is_dynamic = dynamic,
    });
    const quantization_spec weight = checked({
        .dtype = dtype::int8,
        .quant_min = -128,
        .quant_max = 127,
        .qscheme = qscheme::per_channel_symmetric,
        .ch_axis = 0,
        .observer = qat ? observer_kind::moving_average_per_channel_min_max : observer_kind::per_channel_min_max,
        .is_fake_quantize = qat,
    });
    // x86 keeps an output activation spec even when dynamic, as torchao does.
    return {activation, activation, weight, std::nullopt, qat};
}

}  // namespace versatil
