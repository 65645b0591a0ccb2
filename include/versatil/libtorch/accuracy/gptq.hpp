// GPTQ weight rounding (the `gptq` option; Frantar et al. 2022, "GPTQ: Accurate Post-Training
// Quantization for Generative Pre-trained Transformers", the one-shot form of Optimal Brain
// Quantization). Rounding every weight to its nearest grid point makes each rounding error
// small, but what the next layer reads is the layer's output, and there the errors of weights
// that see correlated inputs (neighbouring pixels, the channels of one feature) add up. GPTQ
// rounds a layer's input columns one at a time and moves each column's rounding error onto
// the columns not rounded yet, weighted by the inverse of H = sum x x^T over the layer's
// calibration inputs, so that the layer's output on those inputs, ||W X - Q X||, stays close.
// The grid is the one convert will use: each layer's weight observer's scale and zero point
// (already final after calibrating: a weight's range does not depend on the data), so the
// rounded weights are written back on it and convert quantizes them to exactly these integers.
//
// Runs after calibrating and before convert, on the prepared model. H comes from prepare's
// float model (batch norm folded, equalized where cle is on), one forward per calibration
// batch for all layers together. Convolutions are rounded as the matrix [out, in / groups x
// kernel] against their unfolded (im2col) input, per group; columns go in decreasing order of
// H's diagonal (the paper's act-order), and H is damped by a fraction of its mean diagonal, which
// also keeps it invertible where the calibration inputs span fewer directions than it has.
#pragma once

#include <ATen/ATen.h>
#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/layer_graph.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/accuracy/layer_recorder.hpp"

namespace versatil::libtorch {

// The integer grid of one layer's weights, as its observer chose it: per output channel
// (scale and zero point of length out) or per tensor (length 1).
struct weight_grid {
    at::Tensor scale;       // float64
    at::Tensor zero_point;  // float64
    double quant_min = 0;
    double quant_max = 0;
};

namespace detail {

// How a convolution op unfolds its input: stride, padding and dilation per spatial dim (1-d
// convolutions as 2-d ones of height 1), groups.
struct unfolding {
    std::vector<std::int64_t> kernel, stride, padding, dilation;
    std::int64_t groups = 1;
    bool one_d = false;
    bool operator==(const unfolding&) const = default;
};

// An int list argument known before the forward runs: a constant, or a list built of
// constants (what an inlined nn.Conv2d passes for its stride, padding and dilation).
inline std::optional<std::vector<std::int64_t>> constant_ints(::torch::jit::Value* value) {
    if (value->node()->kind() == c10::prim::ListConstruct) {
        std::vector<std::int64_t> ints;
        for (::torch::jit::Value* item : value->node()->inputs()) {
            const std::optional<c10::IValue> constant = ::torch::jit::toIValue(item);
            if (!constant || !constant->isInt()) return std::nullopt;
            ints.push_back(constant->toInt());
        }
        return ints;
    }
    const std::optional<c10::IValue> constant = ::torch::jit::toIValue(value);
    if (!constant || !constant->isIntList()) return std::nullopt;
    return constant->toIntVector();
}

// The unfolding of a conv op (aten::conv1d / conv2d: input, weight, bias, stride, padding,
// dilation, groups), or the reason it cannot be read: its arguments must be constants, as
// nn.Conv1d / nn.Conv2d make them.
inline std::optional<unfolding> conv_unfolding(::torch::jit::Node* op, const at::Tensor& weight, std::string& why_not) {
    const std::string_view kind = op->kind().toQualString();
    if (kind != "aten::conv2d" && kind != "aten::conv1d") {
        why_not = std::string(kind) + " (GPTQ here unfolds 1-d and 2-d convolutions)";
        return std::nullopt;
    }
    unfolding result;
    result.one_d = kind == "aten::conv1d";
    for (std::int64_t d = 2; d < weight.dim(); ++d) result.kernel.push_back(weight.size(d));
    const auto stride = constant_ints(op->input(3));
    const auto dilation = constant_ints(op->input(5));
    const std::optional<c10::IValue> groups = ::torch::jit::toIValue(op->input(6));
    const std::optional<std::vector<std::int64_t>> padding_ints = constant_ints(op->input(4));
    const c10::optional<c10::IValue> padding = padding_ints ? c10::nullopt : ::torch::jit::toIValue(op->input(4));
    if (!stride || !dilation || !groups || !groups->isInt() || (!padding_ints && !padding)) {
        why_not = "its stride, padding, dilation or groups are not constants";
        return std::nullopt;
    }
    result.stride = *stride, result.dilation = *dilation, result.groups = groups->toInt();
    if (padding_ints) {
        result.padding = *padding_ints;
    } else if (padding->isString() && padding->toStringRef() == "valid") {
        result.padding.assign(result.kernel.size(), 0);
    } else if (padding->isString() && padding->toStringRef() == "same") {
        for (std::size_t d = 0; d < result.kernel.size(); ++d) {
            const std::int64_t total = result.dilation[d] * (result.kernel[d] - 1);
            if (total % 2 != 0) {
                why_not = "padding='same' pads it unevenly";
                return std::nullopt;
            }
            result.padding.push_back(total / 2);
        }
    } else {
        why_not = "its padding is neither a list nor 'valid' / 'same'";
        return std::nullopt;
    }
    if (result.one_d) {
        for (auto* dims : {&result.kernel, &result.stride, &result.padding, &result.dilation})
            dims->insert(dims->begin(), 1);
        result.kernel.front() = 1;
    }
    return result;
}

// A conv layer's input as GPTQ's matrix rows: [groups, samples x positions, in / groups x kernel].
inline at::Tensor unfolded_rows(at::Tensor input, const unfolding& geometry) {
    if (geometry.one_d) input = input.unsqueeze(2);
    const at::Tensor columns = at::im2col(input.to(at::kFloat), geometry.kernel, geometry.dilation, geometry.padding,
                                          geometry.stride);  // [N, C x kernel, positions]
    const std::int64_t samples = columns.size(0), width = columns.size(1) / geometry.groups;
    return columns.view({samples, geometry.groups, width, columns.size(2)})
        .permute({1, 0, 3, 2})
        .reshape({geometry.groups, -1, width});
}

// Appends the input of the op it is inserted before to the layer's list; returns it unchanged.
inline constexpr record_method input_lists{"_versatil_record_input", R"JIT(
def _versatil_record_input(self, x: Tensor) -> Tensor:
    self._versatil_inputs.append(x.detach())
    return x
)JIT", record_method::side::input};

// H = sum x x^T of each layer's inputs over calibration batches, per group (float64,
// [groups, width, width]; one group for a linear layer), from the conv / linear inputs of a layer_recorder.
class input_hessians {
public:
    input_hessians(const ::torch::jit::Module& model, const std::set<std::string>& layers)
        : recorder_(model, layers, input_lists,
                    [](::torch::jit::Module& module, const std::string&, bool first) {
                        if (!first) return module.setattr("_versatil_inputs", c10::List<at::Tensor>());
                        module.register_attribute("_versatil_inputs", c10::ListType::ofTensors(),
                                                  c10::List<at::Tensor>());
                    },
                    [&](const layer_op& found, const ::torch::jit::Module& module) { see(found, module); }) {}

    // Runs `batches` and adds each layer's inputs to its H.
    void accumulate(const std::vector<batch>& batches) {
        const ::torch::NoGradGuard no_grad;
        for (const batch& inputs : batches) {
            recorder_.forward(inputs);
            for (auto& [path, recorded] : layers_) {
                ::torch::jit::Module module = recorder_.layer(path);
                c10::List<at::Tensor> seen = module.attr("_versatil_inputs").toTensorList();
                module.setattr("_versatil_inputs", c10::List<at::Tensor>());
                if (!recorded.skipped.empty()) continue;
                for (std::size_t i = 0; i < seen.size(); ++i) {
                    const at::Tensor input = seen.get(i);
                    if (!at::isFloatingType(input.scalar_type())) {
                        recorded.skipped = "its input is not a float tensor";
                        break;
                    }
                    const at::Tensor rows = recorded.geometry ? unfolded_rows(input, *recorded.geometry)
                                                              : input.to(at::kFloat).reshape({1, -1, input.size(-1)});
                    const at::Tensor sum = at::bmm(rows.transpose(1, 2), rows).to(at::kDouble);
                    recorded.hessian = recorded.hessian.defined() ? recorded.hessian + sum : sum;
                }
            }
        }
    }

    // The layer's H ([groups, width, width]), or why it has none.
    std::optional<at::Tensor> hessian(const std::string& path, std::string& why_not) const {
        const auto found = layers_.find(path);
        if (found != layers_.end() && !found->second.skipped.empty()) {
            why_not = found->second.skipped;
            return std::nullopt;
        }
        if (found == layers_.end() || !found->second.hessian.defined()) {
            why_not = "the calibration data does not run it";
            return std::nullopt;
        }
        return found->second.hessian;
    }

private:
    struct layer {
        std::optional<unfolding> geometry{};  // none for a linear layer
        at::Tensor hessian{};
        std::string skipped{};  // why GPTQ cannot round it
    };

    // A recorded op of `module`: a convolution's calls must all unfold their inputs alike.
    void see(const layer_op& found, const ::torch::jit::Module& module) {
        layer& recorded = layers_[found.path];
        const at::Tensor weight = module.attr("weight").toTensor();
        if (!recorded.skipped.empty() || weight.dim() <= 2) return;
        std::string why_not;
        const std::optional<unfolding> geometry = conv_unfolding(found.op, weight, why_not);
        if (!geometry) recorded.skipped = why_not;
        else if (recorded.geometry && !(*recorded.geometry == *geometry))
            recorded.skipped = "its calls unfold their inputs differently";
        else recorded.geometry = geometry;
    }

    std::map<std::string, layer> layers_;  // the layers whose ops the forward runs; before recorder_, which fills it
    layer_recorder recorder_;
};

// Round to nearest on the grid, row by row: rows [rows, columns], scale / zero point [rows] or [1].
inline at::Tensor rounded_to_grid(const at::Tensor& rows, const weight_grid& grid) {
    const at::Tensor scale = grid.scale.view({-1, 1}), zero_point = grid.zero_point.view({-1, 1});
    return (at::clamp(at::round(rows / scale) + zero_point, grid.quant_min, grid.quant_max) - zero_point) * scale;
}

// sum over groups of tr(E H E^T), for weight errors E [groups, rows, width] against their
// inputs' H [groups, width, width]: the squared output error, summed over the calibration
// inputs, that the errors cause.
inline double output_error(const at::Tensor& error, const at::Tensor& hessian) {
    const at::Tensor e = error.to(at::kFloat);
    return at::sum(at::bmm(e, hessian.to(at::kFloat)) * e).item<double>();
}

}  // namespace detail

// GPTQ on the weight matrices of a layer's groups, [groups, rows, width], each with its input
// H [groups, width, width] (one group for a linear layer or an ungrouped convolution; a
// depthwise convolution has one per channel, rounded together). Returns the rounded matrices,
// every entry on `grid` (scale and zero point [groups x rows] or [1]). Float32, as the paper's
// code, but for H's inverse factor (double, below): the factorizations and products are most of
// GPTQ's time. `damping` is the fraction of
// H's mean diagonal added to its diagonal; `block` the columns rounded between two updates of
// the columns after them.
inline at::Tensor gptq_round(at::Tensor weight, at::Tensor hessian, const weight_grid& grid, double damping,
                             std::int64_t block = 128) {
    const std::int64_t groups = weight.size(0), rows = weight.size(1), width = weight.size(2);
    weight = weight.to(at::kFloat).clone();
    hessian = hessian.to(at::kFloat).clone();
    at::Tensor diagonal = hessian.diagonal(0, 1, 2);  // a view: [groups, width]
    // An input that is always zero says nothing about its column: it keeps its nearest value.
    diagonal.masked_fill_(diagonal == 0, 1.0f);
    // Columns in decreasing order of their inputs' energy (act-order), per group.
    const at::Tensor order = at::argsort(diagonal, /*dim=*/1, /*descending=*/true);
    weight = weight.gather(2, order.unsqueeze(1).expand({groups, rows, width}));
    hessian = hessian.gather(1, order.unsqueeze(2).expand({groups, width, width}))
                  .gather(2, order.unsqueeze(1).expand({groups, width, width}));
    hessian.diagonal(0, 1, 2).add_(damping * hessian.diagonal(0, 1, 2).mean(1, /*keepdim=*/true));
    // The upper Cholesky factor U of H^-1 (U^T U = H^-1): row j holds the weights by which
    // column j's error spreads over the columns after it (the paper's equation 4 for all j at once).
    // In double: Debian's OpenBLAS 0.3.21, on a CPU it runs as Prescott, crashes in single precision's
    // inverse from a Cholesky factor (spotri's strsm kernel, an aligned load off alignment) for some
    // widths: 147, 243, 363, 405 and 2187 of those tried, ResNet-18's first convolution (3 x 7 x 7)
    // among them; PyTorch's own torch.cholesky_inverse does the same. Double takes twice the time
    // (4.8 against 9.6 s at width 4608, one thread) and crashed at none.
    const at::Tensor factor =
        at::linalg_cholesky(at::cholesky_inverse(at::linalg_cholesky(hessian.to(at::kDouble))), /*upper=*/true)
            .to(at::kFloat);

    const at::Tensor scale = grid.scale.to(at::kDouble).expand({groups * rows}).contiguous();
    const at::Tensor zero_point = grid.zero_point.to(at::kDouble).expand({groups * rows}).contiguous();
    at::Tensor rounded = at::empty({groups, width, rows}, at::kFloat);  // column-major while rounding
    for (std::int64_t begin = 0; begin < width; begin += block) {
        const std::int64_t end = std::min(begin + block, width), count = end - begin;
        at::Tensor columns = weight.slice(2, begin, end).transpose(1, 2).contiguous();  // [groups, count, rows]
        at::Tensor errors = at::empty({groups, count, rows}, at::kFloat);
        const at::Tensor spread = factor.slice(1, begin, end).slice(2, begin, end).contiguous();
        for (std::int64_t g = 0; g < groups; ++g) {
            float* w = columns.data_ptr<float>() + g * count * rows;
            float* e = errors.data_ptr<float>() + g * count * rows;
            float* q = rounded.data_ptr<float>() + (g * width + begin) * rows;
            const float* u = spread.data_ptr<float>() + g * count * count;
            const double* s = scale.data_ptr<double>() + g * rows;
            const double* z = zero_point.data_ptr<double>() + g * rows;
            for (std::int64_t j = 0; j < count; ++j) {
                const float pivot = u[j * count + j];
                for (std::int64_t r = 0; r < rows; ++r) {
                    const double level =
                        std::clamp(std::nearbyint(w[j * rows + r] / s[r]) + z[r], grid.quant_min, grid.quant_max);
                    q[j * rows + r] = static_cast<float>((level - z[r]) * s[r]);
                    e[j * rows + r] = (w[j * rows + r] - q[j * rows + r]) / pivot;
                }
                for (std::int64_t k = j + 1; k < count; ++k)
                    for (std::int64_t r = 0; r < rows; ++r) w[k * rows + r] -= e[j * rows + r] * u[j * count + k];
            }
        }
        if (end < width)
            weight.slice(2, end, width)
                .sub_(at::bmm(errors.transpose(1, 2), factor.slice(1, begin, end).slice(2, end, width)));
    }
    return rounded.transpose(1, 2).gather(
        2, at::argsort(order, /*dim=*/1, /*descending=*/false).unsqueeze(1).expand({groups, rows, width}));
}

struct gptq_options {
    // Samples H is summed over (whole batches, at least one).
    std::int64_t max_samples = 256;
    // The fraction of H's mean diagonal added to its diagonal. The paper takes 0.01 with 128
    // sequences of 2048 tokens; calibration sets here are a few hundred images, whose H for a
    // deep layer (few positions, wide unfolded input) spans fewer directions than it has, and
    // there a stronger pull towards round-to-nearest generalizes better: on the architecture
    // zoo's held-out samples (x86_inductor), 0.1 beat 0.01 on 4 of 5 models and 0.3 on 3.
    double damping = 0.1;
};

// One layer rounded by GPTQ or AdaRound.
struct rounded_layer {
    std::string path;
    // tr(E H E^T) on the calibration inputs for round-to-nearest and for the rounding used: the summed
    // squared error of the layer's output that the weights' rounding causes.
    double nearest_error = 0.0;
    double rounded_error = 0.0;
};

struct rounding_summary {
    std::vector<rounded_layer> rounded;                         // in the order the forward runs them
    std::vector<std::pair<std::string, std::string>> skipped;  // path, why
    std::int64_t samples = 0;
};

namespace detail {

// The weight observer LibTorch's InsertObservers put on a prepared layer (marked
// observes_parameter by the plan), if there is exactly one.
inline std::optional<::torch::jit::Module> weight_observer(const ::torch::jit::Module& layer) {
    std::optional<::torch::jit::Module> found;
    for (const auto& child : layer.named_children()) {
        if (!child.value.hasattr("observes_parameter") || !child.value.attr("observes_parameter").toBool()) continue;
        if (found) return std::nullopt;
        found = child.value;
    }
    return found;
}

inline std::optional<weight_grid> grid_of(const ::torch::jit::Module& observer, std::int64_t out_channels,
                                          std::string& why_not) {
    ::torch::jit::Module module = observer;
    const auto qparams = module.run_method("calculate_qparams").toTuple();
    weight_grid grid{qparams->elements()[0].toTensor().to(at::kDouble).reshape({-1}),
                     qparams->elements()[1].toTensor().to(at::kDouble).reshape({-1}),
                     static_cast<double>(observer.attr("quant_min").toInt()),
                     static_cast<double>(observer.attr("quant_max").toInt())};
    const std::int64_t axis = observer.attr("ch_axis").toInt();
    if (grid.scale.numel() != 1 && (axis != 0 || grid.scale.numel() != out_channels)) {
        why_not = "its weight scales are not per output channel or per tensor";
        return std::nullopt;
    }
    return grid;
}

}  // namespace detail

namespace detail {

// Rounds, in `prepared` (calibrated, not converted), the weights of the layers of `reference`
// (prepare's float model) that `in_scope` selects, each by `round(matrices, H, grid)` (the shapes
// gptq_round takes) with H from up to `max_samples` samples of `calibration`; `round` returns none, and
// sets its last argument to why, for a layer it leaves to nearest rounding.
template <class InScope, class Round>
rounding_summary round_layers(prepared_model& prepared, const ::torch::jit::Module& reference,
                              const std::vector<batch>& calibration, InScope&& in_scope, std::int64_t max_samples,
                              Round&& round) {
    rounding_summary summary;
    const std::vector<batch> batches = leading_batches(calibration, max_samples);
    summary.samples = samples_in(batches);
    std::vector<std::string> order;
    std::set<std::string> layers;
    for (const weighted_layer& layer : find_layer_graph(reference).layers)
        if (in_scope(layer.path) && weight_observer(find_submodule(prepared.module, layer.path)) &&
            layers.insert(layer.path).second)
            order.push_back(layer.path);
    if (layers.empty() || batches.empty()) return summary;

    input_hessians hessians(reference, layers);
    hessians.accumulate(batches);
    for (const std::string& path : order) {
        ::torch::jit::Module layer = find_submodule(prepared.module, path);
        const at::Tensor weight = layer.attr("weight").toTensor();
        std::string why_not;
        const std::optional<at::Tensor> hessian = hessians.hessian(path, why_not);
        const std::optional<weight_grid> grid =
            hessian ? grid_of(*weight_observer(layer), weight.size(0), why_not) : std::nullopt;
        if (!hessian || !grid) {
            summary.skipped.emplace_back(path, why_not);
            continue;
        }
        const std::int64_t groups = hessian->size(0);
        const at::Tensor matrices = weight.detach().to(at::kFloat).reshape({groups, weight.size(0) / groups, -1});
        rounded_layer done{path};
        const std::optional<at::Tensor> rounded = round(matrices, *hessian, *grid, why_not);
        if (!rounded) {
            summary.skipped.emplace_back(path, why_not);
            continue;
        }
        at::Tensor result = *rounded;
        const ::torch::NoGradGuard no_grad;
        const at::Tensor nearest = rounded_to_grid(matrices.reshape({weight.size(0), -1}), *grid).view_as(matrices);
        done.nearest_error = output_error(matrices - nearest, *hessian);
        done.rounded_error = output_error(matrices - result.to(at::kFloat), *hessian);
        // A layer whose inputs the rounding fits worse than rounding to nearest (GPTQ: possible where H, from
        // few samples, is far from its damped form) keeps the nearest values.
        if (done.rounded_error > done.nearest_error) result = nearest;
        layer.setattr("weight", result.reshape(weight.sizes()).to(weight.scalar_type()));
        summary.rounded.push_back(done);
    }
    return summary;
}

// The report's notes on a rounding step (`name`): per target that has it (`step`), how many layers
// and how their output error compares with round-to-nearest's; with `each_layer`, every layer's
// error before and after too; and the layers left to nearest, with why.
inline void note_rounding(prepared_model& prepared, const rounding_summary& summary, bool target_plan::*step,
                          const std::string& name, bool each_layer) {
    const quantization_plan& plan = prepared.plan;
    const auto target_of = [&](const std::string& p) { return plan.target_with(p, step); };
    for (const backend_quantizer& q : plan.quantizer.quantizers()) {
        if (!target_of(std::string(q.module_path))) continue;
        std::size_t layers = 0;
        std::vector<double> ratios;  // of layers whose nearest rounding has any output error
        for (const rounded_layer& layer : summary.rounded) {
            if (target_of(layer.path) != std::string(q.module_path)) continue;
            ++layers;
            if (layer.nearest_error > 0)
                ratios.push_back(std::min(layer.rounded_error, layer.nearest_error) / layer.nearest_error);
        }
        std::sort(ratios.begin(), ratios.end());
        char figures[200] = "";
        if (!ratios.empty())
            std::snprintf(figures, sizeof figures,
                          " (layer output error from rounding, on those samples: median %.2f, largest %.2f of "
                          "round-to-nearest's)",
                          ratios[ratios.size() / 2], ratios.back());
        prepared.adjustments.push_back({std::string(q.module_path), name + ": " + std::to_string(layers) +
                                                                        " layer(s) rounded on " +
                                                                        std::to_string(summary.samples) +
                                                                        " calibration samples" + figures});
    }
    if (each_layer)
        for (const rounded_layer& layer : summary.rounded) {
            char figures[200];
            std::snprintf(figures, sizeof figures,
                          ": layer output error on the calibration samples %.4g with round-to-nearest, %.4g rounded",
                          layer.nearest_error, std::min(layer.rounded_error, layer.nearest_error));
            prepared.adjustments.push_back({layer.path, name + figures});
        }
    for (const auto& [path, why] : summary.skipped)
        prepared.adjustments.push_back({path, name + ": rounded to nearest, because " + why});
}

}  // namespace detail

// GPTQ on the layers of `reference` (prepare's float model) that `in_scope` selects, in `prepared`
// (calibrated, not converted), with H from `calibration`.
template <class InScope>
rounding_summary round_weights(prepared_model& prepared, const ::torch::jit::Module& reference,
                               const std::vector<batch>& calibration, InScope&& in_scope,
                               const gptq_options& options = {}) {
    return detail::round_layers(prepared, reference, calibration, in_scope, options.max_samples,
                                [&](const at::Tensor& matrices, const at::Tensor& hessian, const weight_grid& grid,
                                    std::string& why_not) -> std::optional<at::Tensor> {
                                    const ::torch::NoGradGuard no_grad;
                                    try {
                                        return gptq_round(matrices, hessian, grid, options.damping);
                                    } catch (const c10::Error& failure) {  // H not positive definite even damped
                                        why_not = "its input statistics cannot be inverted (" + one_line(failure) + ")";
                                        return std::nullopt;
                                    }
                                });
}

// The pipeline's step for the gptq option, between calibrate and convert: rounds the layers of
// every target that has the option, on `batches` (the calibration data), and notes per target
// what it did.
inline void round_weights_for_targets(prepared_model& prepared, const std::vector<batch>& batches) {
    const quantization_plan& plan = prepared.plan;
    if (!plan.any(&target_plan::rounds_weights) || !prepared.folded_model) return;
    const auto in_scope = [&](const std::string& path) {
        return plan.target_with(path, &target_plan::rounds_weights).has_value();
    };
    detail::note_rounding(prepared, round_weights(prepared, *prepared.folded_model, batches, in_scope),
                          &target_plan::rounds_weights, "gptq", false);
}

// The sequence's step for the gptq option (accuracy/steps.hpp): on the calibrated model, before convert.
struct gptq_step {
    static bool applies(const target_plan& target) { return target.rounds_weights; }
    static void run(prepared_model& calibrated, const std::vector<batch>& calibration) {
        round_weights_for_targets(calibrated, calibration);
    }
};

}  // namespace versatil::libtorch
