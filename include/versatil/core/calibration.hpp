// Calibration methods: how a static activation's range is estimated from the calibration data
// (the `calibration` option, `XNNPACK<calibration<calibration_method::entropy>>` or
// "xnnpack:calibration=entropy"). Each method is an observer kind of the activation specs;
// weights keep their min-max observers (their values are known, not sampled). Without the
// option a backend keeps the original's method (histogram for x86_inductor and xnnpack).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "versatil/core/quantization_config.hpp"

namespace versatil {

enum class calibration_method : std::uint8_t {
    minmax,         // the range of everything seen (MinMaxObserver)
    moving_minmax,  // each batch's range, averaged (MovingAverageMinMaxObserver)
    histogram,      // PyTorch's HistogramObserver: L2 error search over a histogram
    percentile,     // the 0.01 % and 99.99 % quantiles of the histogram (TensorRT's 99.99)
    entropy,        // TensorRT's KL-divergence calibration over the histogram
    automatic,      // per tensor, the candidate range with the lowest quantization error
    output,         // per tensor, auto's candidate with the lowest error at the model's output
};

inline constexpr std::array calibration_methods{calibration_method::minmax,    calibration_method::moving_minmax,
                                                calibration_method::histogram, calibration_method::percentile,
                                                calibration_method::entropy,   calibration_method::automatic,
                                                calibration_method::output};

constexpr std::string_view to_string(calibration_method method) noexcept {
    switch (method) {
        case calibration_method::minmax: return "minmax";
        case calibration_method::moving_minmax: return "moving_minmax";
        case calibration_method::histogram: return "histogram";
        case calibration_method::percentile: return "percentile";
        case calibration_method::entropy: return "entropy";
        case calibration_method::automatic: return "auto";
        case calibration_method::output: return "output";
    }
    return "unknown";
}

// "minmax, moving_minmax, histogram, percentile, entropy, auto, output": for error messages.
inline constexpr std::string_view calibration_method_names =
    "minmax, moving_minmax, histogram, percentile, entropy, auto, output";

constexpr std::optional<calibration_method> parse_calibration_method(std::string_view text) noexcept {
    for (const calibration_method method : calibration_methods)
        if (to_string(method) == text) return method;
    return std::nullopt;
}

constexpr observer_kind observer_of(calibration_method method) noexcept {
    switch (method) {
        case calibration_method::minmax: return observer_kind::min_max;
        case calibration_method::moving_minmax: return observer_kind::moving_average_min_max;
        case calibration_method::histogram: return observer_kind::histogram;
        case calibration_method::percentile: return observer_kind::histogram_percentile;
        case calibration_method::entropy: return observer_kind::histogram_entropy;
        case calibration_method::automatic: return observer_kind::histogram_auto;
        // auto's observer holds the candidates; a step after calibrating chooses among them
        // (libtorch/accuracy/output_ranges.hpp).
        case calibration_method::output: return observer_kind::histogram_auto;
    }
    return observer_kind::histogram;
}

// The method a config calibrates its activations with; none when nothing is calibrated
// (dynamic quantization, QAT, no activation spec).
constexpr std::optional<calibration_method> calibration_of(const quantization_config& config) noexcept {
    if (!config.input_activation || config.is_qat || config.input_activation->is_dynamic) return std::nullopt;
    if (config.chooses_output_ranges) return calibration_method::output;
    for (const calibration_method method : calibration_methods)
        if (observer_of(method) == config.input_activation->observer) return method;
    return std::nullopt;
}

// `config` with its static activations observed by `method` (none: the config unchanged).
// Only a static, post-training config has activations to calibrate; policies reject the
// option otherwise (options_are_compatible).
constexpr quantization_config with_calibration(quantization_config config, std::optional<calibration_method> method) noexcept {
    if (!method || config.is_qat) return config;
    config.chooses_output_ranges = method == calibration_method::output;
    for (std::optional<quantization_spec>* spec : {&config.input_activation, &config.output_activation})
        if (*spec && !(*spec)->is_dynamic) (*spec)->observer = observer_of(*method);
    return config;
}

}  // namespace versatil
