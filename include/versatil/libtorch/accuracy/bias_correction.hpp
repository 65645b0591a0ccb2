// Empirical bias correction (the `bias_correction` option; Nagel et al. 2019, section 4.2, in
// its empirical form as AIMET's and NNCF's bias correction run it): quantizing a layer's
// weights and input shifts the mean of its output, E[W_q x_q] - E[W x], and the layers after it
// read that shift as signal. Per conv / linear layer, the shift of each output channel (mean
// over the batch and every spatial position) is measured on the calibration data and
// subtracted from the layer's bias.
//
// Measured on the converted model, which computes what the engine will (quantize / dequantize
// around float kernels, with the calibrated qparams), against prepare's float model (batch
// norm folded, equalized where cle is on). Layers are corrected one after the other in the
// order the forward runs them, each measured with the layers before it already corrected, so a
// layer's correction does not also undo a shift that an earlier correction removed (correcting
// every layer at once from one measurement overshoots: each layer would also remove the shift its
// inputs carry, which the layers before it remove too). That is one forward per layer, each
// stopped at the layer it measures, on at most max_samples of the calibration samples. A layer
// without bias (None) is left as it is and reported.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/layer_graph.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/accuracy/layer_recorder.hpp"

namespace versatil::libtorch {

namespace detail {

// Each forward of an instrumented layer adds its output's per-channel sums to these attributes.
inline constexpr record_method output_sums{"_versatil_record_output", R"JIT(
def _versatil_record_output(self, y: Tensor) -> Tensor:
    values = y.detach()
    if values.is_quantized:
        values = values.dequantize()
    channels = values.size(self._versatil_channel_dim)
    per_channel = values.transpose(0, self._versatil_channel_dim).reshape([channels, -1]).double()
    self._versatil_output_sum = self._versatil_output_sum + per_channel.sum(1)
    self._versatil_output_count = self._versatil_output_count + per_channel.size(1)
    assert not self._versatil_stop, "versatil: bias correction measured this layer"
    return y
)JIT", record_method::side::output};

inline void reset_record(::torch::jit::Module& module) {
    module.setattr("_versatil_output_sum", at::zeros({}, at::kDouble));
    module.setattr("_versatil_output_count", std::int64_t{0});
    module.setattr("_versatil_stop", false);
}

// Per-channel output means of a model's layers (the conv / linear outputs of a layer_recorder).
class output_recorder {
public:
    output_recorder(const ::torch::jit::Module& model, const std::map<std::string, weighted_op>& layers)
        : recorder_(model, paths_of(layers), output_sums,
                    [&](::torch::jit::Module& module, const std::string& path, bool first) {
                        const auto kind = layers.find(path);
                        const bool linear = kind != layers.end() && kind->second == weighted_op::linear;
                        const std::int64_t channel_dim = linear ? -1 : 1;
                        if (!first) {
                            module.setattr("_versatil_channel_dim", channel_dim);
                            return reset_record(module);
                        }
                        module.register_attribute("_versatil_channel_dim", c10::IntType::get(), channel_dim);
                        module.register_attribute("_versatil_output_sum", c10::TensorType::get(),
                                                  at::zeros({}, at::kDouble));
                        module.register_attribute("_versatil_output_count", c10::IntType::get(), std::int64_t{0});
                        module.register_attribute("_versatil_stop", c10::BoolType::get(), false);
                    },
                    [](const layer_op&, const ::torch::jit::Module&) {}) {}

    // Runs `batches` and returns each layer's mean output per channel (float64). With `stop_at`,
    // each forward ends once that layer has recorded its output: the layers after it are not run.
    std::map<std::string, at::Tensor> means(const std::vector<batch>& batches, const std::string* stop_at = nullptr) {
        for (auto [path, layer] : recorder_.layers()) reset_record(layer);
        std::optional<::torch::jit::Module> stop;
        if (stop_at) stop = recorder_.layer(*stop_at);
        if (stop) stop->setattr("_versatil_stop", true);
        const ::torch::NoGradGuard no_grad;
        for (const batch& inputs : batches) {
            const std::int64_t recorded = stop ? stop->attr("_versatil_output_count").toInt() : 0;
            try {
                recorder_.forward(inputs);
            } catch (const std::exception&) {
                if (!stop || stop->attr("_versatil_output_count").toInt() == recorded) throw;  // not our stop
            }
        }
        if (stop) stop->setattr("_versatil_stop", false);
        std::map<std::string, at::Tensor> result;
        for (const auto& [path, layer] : recorder_.layers()) {
            const std::int64_t count = layer.attr("_versatil_output_count").toInt();
            if (count == 0) continue;
            result.emplace(path, layer.attr("_versatil_output_sum").toTensor() / static_cast<double>(count));
        }
        return result;
    }

    ::torch::jit::Module layer(const std::string& path) const { return recorder_.layer(path); }

private:
    static std::set<std::string> paths_of(const std::map<std::string, weighted_op>& layers) {
        std::set<std::string> paths;
        for (const auto& [path, kind] : layers) paths.insert(path);
        return paths;
    }

    layer_recorder recorder_;
};

}  // namespace detail

struct bias_correction_options {
    // Samples measured on (whole batches, at least one): each layer is one forward over them.
    std::int64_t max_samples = 256;
};

struct bias_correction_summary {
    std::vector<std::string> corrected;  // layer paths, in the order they were corrected
    std::vector<std::string> without_bias;
    std::map<std::string, at::Tensor> shifts;  // per layer, the per-channel mean shift removed
    std::int64_t samples = 0;                  // measured on
};

// Corrects, in `converted_module` (LibTorch's converted model, before lowering), the biases of
// the layers of `reference` (the float model prepare observed) that `in_scope` selects, on
// `batches`. `converted_module`'s bias attributes are replaced, not written into.
template <class InScope>
bias_correction_summary correct_biases(::torch::jit::Module& converted_module, const ::torch::jit::Module& reference,
                                       const std::vector<batch>& calibration, InScope&& in_scope,
                                       const bias_correction_options& options = {}) {
    bias_correction_summary summary;
    const std::vector<batch> batches = leading_batches(calibration, options.max_samples);
    summary.samples = samples_in(batches);
    std::vector<std::pair<std::string, weighted_op>> layers;
    const layer_graph graph = find_layer_graph(reference);
    for (const weighted_layer& layer : graph.layers) {
        if (!in_scope(layer.path)) continue;
        if (!find_submodule(reference, layer.path).attr("bias").isTensor()) {
            summary.without_bias.push_back(layer.path);
            continue;
        }
        layers.emplace_back(layer.path, layer.kind);
    }
    if (layers.empty() || batches.empty()) return summary;

    const std::map<std::string, weighted_op> kinds(layers.begin(), layers.end());
    detail::output_recorder float_model(reference, kinds);
    const std::map<std::string, at::Tensor> float_means = float_model.means(batches);
    detail::output_recorder quantized_model(converted_module, kinds);
    const ::torch::NoGradGuard no_grad;
    for (const auto& [path, kind] : layers) {
        // A layer called from several places is measured over all of its calls: no early stop.
        const bool called_once =
            std::any_of(graph.layers.begin(), graph.layers.end(),
                        [&](const weighted_layer& layer) { return layer.path == path && layer.call_sites == 1; });
        const std::map<std::string, at::Tensor> quantized_means =
            quantized_model.means(batches, called_once ? &path : nullptr);
        const auto reference_mean = float_means.find(path), mean = quantized_means.find(path);
        if (reference_mean == float_means.end() || mean == quantized_means.end()) continue;  // not run on this data
        const at::Tensor shift = mean->second - reference_mean->second;
        for (::torch::jit::Module module : {quantized_model.layer(path), find_submodule(converted_module, path)}) {
            const at::Tensor bias = module.attr("bias").toTensor();
            module.setattr("bias", (bias.to(at::kDouble) - shift).to(bias.scalar_type()));
        }
        summary.corrected.push_back(path);
        summary.shifts.emplace(path, shift);
    }
    return summary;
}

// The pipeline's step for the bias_correction option, between convert and lower: corrects the
// layers of every target that has the option, on `batches` (the calibration data), and notes per
// target what it did.
inline void correct_biases_for_targets(converted_model& converted, const std::vector<batch>& batches) {
    const quantization_plan& plan = converted.plan;
    if (!plan.any(&target_plan::corrects_biases) || !converted.folded_model) return;
    const auto target_of = [&](const std::string& p) { return plan.target_with(p, &target_plan::corrects_biases); };
    const bias_correction_summary summary =
        correct_biases(converted.module, *converted.folded_model, batches,
                       [&](const std::string& path) { return target_of(path).has_value(); });
    const std::int64_t samples = samples_in(batches);
    const std::string measured_on = summary.samples == samples ? std::to_string(samples) + " calibration samples"
                                                               : std::to_string(summary.samples) + " of the " +
                                                                     std::to_string(samples) + " calibration samples";
    for (const backend_quantizer& q : plan.quantizer.quantizers()) {
        if (!target_of(std::string(q.module_path))) continue;
        int layers = 0;
        double largest = 0.0, total = 0.0;
        std::string largest_at;
        std::int64_t channels = 0;
        for (const std::string& path : summary.corrected) {
            if (target_of(path) != std::string(q.module_path)) continue;
            const at::Tensor shift = summary.shifts.at(path).abs();
            ++layers;
            total += shift.sum().item<double>();
            channels += shift.numel();
            if (shift.max().item<double>() > largest) largest = shift.max().item<double>(), largest_at = path;
        }
        char figures[160];
        std::snprintf(figures, sizeof figures, "mean |shift| %.3g, largest %.3g",
                      channels ? total / static_cast<double>(channels) : 0.0, largest);
        converted.adjustments.push_back(
            {std::string(q.module_path), "bias correction: " + std::to_string(layers) + " layer(s) corrected on " +
                                             measured_on + " (" + figures +
                                             (largest_at.empty() ? "" : " at " + largest_at) + ")"});
    }
    for (const std::string& path : summary.without_bias)
        converted.adjustments.push_back({path, "bias correction: none (the layer has no bias)"});
}

// The sequence's step for the bias_correction option (accuracy/steps.hpp): on the converted model,
// before lowering.
struct bias_correction_step {
    static bool applies(const target_plan& target) { return target.corrects_biases; }
    static void run(converted_model& converted, const std::vector<batch>& calibration) {
        correct_biases_for_targets(converted, calibration);
    }
};

}  // namespace versatil::libtorch
