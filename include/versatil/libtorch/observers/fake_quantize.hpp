// Fake-quantize modules for quantization-aware training: what prepare places instead of
// observers when a target's spec says is_fake_quantize. Each one observes (a moving-average
// min/max, as torchao's QAT configs ask) and then quantizes and dequantizes its input with
// the current qparams, so training sees the rounding and clamping the int8 model will do.
// The gradient passes straight through inside the range (fake_quantize_per_*_affine).
//
// They have the observer interface LibTorch's passes read (dtype, qscheme, ch_axis,
// calculate_qparams), so after training InsertQuantDeQuant and Finalize convert the model
// exactly as after post-training calibration.
//
// Observation runs only in training mode with observer_enabled set; fake quantization runs
// whenever fake_quant_enabled is set (train and eval), once a range has been observed.
#pragma once

#include <torch/script.h>

#include <string>

#include "versatil/libtorch/observers/observers.hpp"

namespace versatil::libtorch {

namespace detail {

inline constexpr std::string_view forward_source = R"JIT(
def forward(self, x: Tensor) -> Tensor:
    if self.training and self.observer_enabled:
        self._observe(x)
    if not self.fake_quant_enabled or x.numel() == 0:
        return x
    if self.ch_axis < 0:
        if bool(self.min_val > self.max_val):
            return x
        scale, zero_point = self.calculate_qparams()
        return torch.fake_quantize_per_tensor_affine(x, float(scale[0]), int(zero_point[0]),
                                                     self.quant_min, self.quant_max)
    if self.min_val.numel() == 0:
        return x
    scale, zero_point = self.calculate_qparams()
    return torch.fake_quantize_per_channel_affine(x, scale, zero_point.int(), self.ch_axis,
                                                  self.quant_min, self.quant_max)
)JIT";

inline ::torch::jit::Module compile_fake_quantize_prototype(observer_kind kind) {
    const bool per_channel = is_per_channel(kind);
    ::torch::jit::Module module = detail::module_with_spec_attributes(
        std::string("__torch__.versatil.fake_quantize.") + (per_channel ? "PerChannelFakeQuantize" : "FakeQuantize"),
        kind);
    module.register_attribute("training", c10::BoolType::get(), false);
    module.register_attribute("observer_enabled", c10::BoolType::get(), true);
    module.register_attribute("fake_quant_enabled", c10::BoolType::get(), true);
    module.register_buffer(observer_state::min_val, ::torch::zeros({0}));
    module.register_buffer(observer_state::max_val, ::torch::zeros({0}));
    detail::define_observer_methods(module, kind, "_observe");
    module.define(std::string(forward_source));
    module.run_method("reset_min_max_vals");
    return module;
}

}  // namespace detail

// A fake-quantize module for one QAT spec (is_fake_quantize with a moving-average observer).
inline ::torch::jit::Module make_fake_quantize(const quantization_spec& spec) {
    if (const spec_rule rule = first_violated_rule(spec); rule != spec_rule::ok)
        throw error(error_kind::invalid_argument,
                    "make_fake_quantize: invalid quantization spec: " + std::string(to_string(rule)));
    if (!spec.is_fake_quantize || !is_moving_average(spec.observer))
        throw error(error_kind::invalid_argument,
                    "make_fake_quantize: the spec must be a fake-quantize spec with a moving-average observer "
                    "(a backend's qat option gives one)");
    ::torch::jit::Module module = in_own_unit(
        detail::prototype<detail::compile_fake_quantize_prototype, observer_kind::moving_average_min_max,
                                   observer_kind::moving_average_per_channel_min_max>(spec.observer)
            .deepcopy());
    detail::write_spec(module, spec);
    return module;
}

// The module a spec asks for: a fake-quantize module for QAT specs, an observer otherwise.
inline ::torch::jit::Module make_observer_or_fake_quantize(const quantization_spec& spec) {
    return spec.is_fake_quantize ? make_fake_quantize(spec) : make_observer(spec);
}

}  // namespace versatil::libtorch
