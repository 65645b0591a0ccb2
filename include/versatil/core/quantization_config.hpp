// What a backend does to the modules it quantizes: specs for input and output activations,
// weights and bias (torchao's QuantizationConfig). A missing spec means "stays float".
#pragma once

#include <optional>

#include "versatil/core/quantization_spec.hpp"

namespace versatil {

struct quantization_config {
    std::optional<quantization_spec> input_activation;
    std::optional<quantization_spec> output_activation;  // none for dynamic: outputs stay float
    std::optional<quantization_spec> weight;
    std::optional<quantization_spec> bias;  // none: bias stays float, as in both backends
    bool is_qat = false;
    // Steps that improve accuracy beyond the specs (the cle, bias_correction and gptq options):
    // conv/linear chains equalized in float before observers go in; each layer's mean output
    // shift, measured on the calibration data after calibrating, removed from its bias; weights
    // rounded against the layers' calibration inputs (GPTQ) instead of to nearest.
    bool cross_layer_equalization = false;
    bool bias_correction = false;
    bool gptq = false;
    bool adaround = false;  // weights rounded by AdaRound instead (accuracy/adaround.hpp)
    // calibration=output: each activation's range chosen by the error at the model's output.
    bool chooses_output_ranges = false;

    friend constexpr bool operator==(const quantization_config&, const quantization_config&) = default;
};

constexpr bool is_valid(const quantization_config& config) noexcept {
    const auto valid = [](const std::optional<quantization_spec>& spec) { return !spec || is_valid(*spec); };
    return valid(config.input_activation) && valid(config.output_activation) && valid(config.weight) &&
           valid(config.bias);
}

// `config` with the accuracy steps of a policy's options switched on.
constexpr quantization_config with_accuracy_steps(quantization_config config, bool cross_layer_equalization,
                                                  bool bias_correction, bool gptq, bool adaround = false) noexcept {
    config.cross_layer_equalization = cross_layer_equalization;
    config.bias_correction = bias_correction;
    config.gptq = gptq;
    config.adaround = adaround;
    return config;
}

constexpr bool is_dynamic(const quantization_config& config) noexcept {
    return config.input_activation && config.input_activation->is_dynamic;
}

}  // namespace versatil
