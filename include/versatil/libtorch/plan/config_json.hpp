// Backend configurations as JSON (nlohmann): what a saved model's metadata and a report
// record of each target.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>

#include "versatil/core/backend_descriptor.hpp"
#include "versatil/core/composition_error.hpp"
#include "versatil/libtorch/plan/target_shown.hpp"

namespace versatil::libtorch {

inline nlohmann::json to_json(const std::optional<quantization_spec>& spec) {
    if (!spec) return nullptr;  // stays float
    nlohmann::json json{
        {"dtype", to_string(spec->dtype)},
        {"quant_min", spec->quant_min},
        {"quant_max", spec->quant_max},
        {"qscheme", to_string(spec->qscheme)},
        {"observer", to_string(spec->observer)},
        {"eps", spec->eps},
        {"is_fake_quantize", spec->is_fake_quantize},
        {"is_dynamic", spec->is_dynamic},
    };
    if (spec->ch_axis != no_channel_axis) json["ch_axis"] = spec->ch_axis;
    if (is_moving_average(spec->observer)) json["averaging_constant"] = spec->averaging_constant;
    return json;
}

inline nlohmann::json to_json(const quantization_config& config) {
    return {{"input_activation", to_json(config.input_activation)},
            {"output_activation", to_json(config.output_activation)},
            {"weight", to_json(config.weight)},
            {"bias", to_json(config.bias)},
            {"is_qat", config.is_qat},
            {"cross_layer_equalization", config.cross_layer_equalization},
            {"bias_correction", config.bias_correction},
            {"gptq", config.gptq},
            {"adaround", config.adaround}};
}

// A target as "path", "backend" (exclude_spec for an exclude), "options" and "config".
inline nlohmann::json to_json(const target_info& target) {
    nlohmann::json json{{"path", target.path}, {"backend", backend_shown(target)}};
    if (!target.is_exclude()) {
        json["options"] = target.backend->options;
        json["spec"] = backend_label(target.backend);
        json["config"] = to_json(target.backend->config);
    }
    return json;
}

}  // namespace versatil::libtorch
