// The per-layer quantization switches of one quantization, whichever kind its targets are: a
// static plan's on the converted model (sensitivity.hpp), a dynamic plan's on the direct path's
// model (dynamic_switches.hpp). The per-layer analysis and the accuracy target's search hold one.
#pragma once

#include <torch/script.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "versatil/libtorch/analysis/dynamic_switches.hpp"
#include "versatil/libtorch/analysis/sensitivity.hpp"

namespace versatil::libtorch {

class layer_switches {
public:
    // None for a static plan without its converted model, or a dynamic one whose model the
    // direct path does not cover. `choose_on`: the calibration data on which quantize() chose the
    // dynamic layers' weights (accuracy/dynamic_weight_choice.hpp), so the switches hold the same.
    static std::optional<layer_switches> make(const ::torch::jit::Module& model, const quantization_plan& plan,
                                              const ::torch::jit::Module* converted,
                                              const std::vector<std::string>& layers,
                                              const std::vector<batch>& choose_on = {}) {
        if (plan.quantizer.is_dynamic()) {
            std::optional<switchable_dynamic_quantization> dynamic =
                switchable_dynamic_quantization::make(model, plan, layers, choose_on);
            if (!dynamic) return std::nullopt;
            return layer_switches(std::move(*dynamic));
        }
        if (!converted) return std::nullopt;
        return layer_switches(switchable_quantization(*converted, layers, ::torch::jit::QuantType::STATIC));
    }

    void quantize_layer(const std::string& layer, bool on) {
        std::visit([&](auto& switches) { switches.quantize_layer(layer, on); }, switches_);
    }
    [[nodiscard]] std::vector<std::string> switch_names(const std::string& layer) const {
        return std::visit([&](const auto& switches) { return switches.switch_names(layer); }, switches_);
    }
    void keep_in_float(const std::vector<std::string>& kept) {
        std::visit([&](auto& switches) { switches.keep_in_float(kept); }, switches_);
    }
    [[nodiscard]] bool stands_for_keeping(const std::vector<std::string>& kept) const {
        return std::visit([&](const auto& switches) { return switches.stands_for_keeping(kept); }, switches_);
    }
    // Dynamic switches stand for every layer alone (dynamic_switches.hpp).
    [[nodiscard]] bool stands_for_alone(const std::string& layer) const {
        const auto* fixed = std::get_if<switchable_quantization>(&switches_);
        return !fixed || fixed->stands_for_alone(layer);
    }
    const ::torch::jit::Module& module() const {
        return std::visit([](const auto& switches) -> const ::torch::jit::Module& { return switches.module(); },
                          switches_);
    }
    // A static plan's switches, whose layers share values (sensitivity.hpp), or none.
    const switchable_quantization* static_switches() const { return std::get_if<switchable_quantization>(&switches_); }
    // The engine the dynamic switches packed their weights for, which must run them.
    std::optional<at::QEngine> engine() const {
        const auto* dynamic = std::get_if<switchable_dynamic_quantization>(&switches_);
        return dynamic ? std::optional(dynamic->engine()) : std::nullopt;
    }

private:
    explicit layer_switches(std::variant<switchable_quantization, switchable_dynamic_quantization> switches)
        : switches_(std::move(switches)) {}

    std::variant<switchable_quantization, switchable_dynamic_quantization> switches_;
};

}  // namespace versatil::libtorch
