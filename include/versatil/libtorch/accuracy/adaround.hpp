// AdaRound weight rounding (the `adaround` option; Nagel et al. 2020, "Up or Down? Adaptive
// Rounding for Post-Training Quantization"). Each weight is rounded down or up on its layer's
// grid, and which one is learned: a continuous variable V per weight gives the soft rounding
// h(V) = clamp(sigmoid(V) (zeta - gamma) + gamma, 0, 1) (the rectified sigmoid, which reaches 0
// and 1 exactly), and Adam minimises the layer's output error on its calibration inputs,
// ||W X - W~ X||^2, plus a regulariser sum 1 - |2 h(V) - 1|^beta that pulls every h to 0 or 1
// as beta falls from 20 to 2; at the end each weight takes the side its h is on.
//
// The output error is read from the same H = sum x x^T GPTQ sums (accuracy/gptq.hpp): for
// weight errors E, ||E X||^2 = tr(E H E^T) exactly, so an iteration costs one product with H,
// whatever the number of calibration samples. Runs where GPTQ runs, on the same grid (each layer's
// weight observer's), between calibrate and convert; a layer it fits worse than rounding to
// nearest keeps the nearest values.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "versatil/libtorch/accuracy/gptq.hpp"

namespace versatil::libtorch {

struct adaround_options {
    // Adam steps per layer. The paper takes 10,000 on minibatches of the recorded inputs; with
    // the exact loss from H every step sees all of them, and on the brute-force test's layers
    // (tests/torch/adaround.cpp) 1,000 or 3,000 steps found no better rounding than 300.
    std::int64_t iterations = 300;
    double learning_rate = 0.05;
    // The share of iterations before the regulariser switches on (the paper's warm-up, 20%), and
    // its weight: the reconstruction term is divided by round-to-nearest's error and the
    // regulariser averaged over the weights, so that the balance does not depend on the layer's
    // size or scale (the paper's lambda = 0.01 weighs a sum against a data-dependent output error).
    // 100 came out best of 1 to 100 on those layers: the regulariser is nearly flat at beta = 20
    // and must still dominate once beta is small, or weights stay between levels until rounded hard.
    double warm_up = 0.2;
    double regularization = 100.0;
    double beta_start = 20.0, beta_end = 2.0;
    // Samples H is summed over (whole batches, at least one), as GPTQ's.
    std::int64_t max_samples = 256;
    // A step costs a product with H, groups x rows x width^2 multiply-adds (three times that with
    // the gradient); a layer above this keeps nearest rounding, named in the report, so that a model
    // takes seconds: resnet18's 512-channel 3x3 convolutions (512 x 4608^2 = 1.1e10) would take about
    // an hour each. 3e7 is a 128-channel layer of unfolded width 480 (a 3x3 convolution of 53
    // channels, or a linear layer of 480 inputs).
    double max_step_cost = 3e7;
};

namespace detail {

// The rectified sigmoid's stretch (the paper's zeta and gamma).
inline constexpr double adaround_zeta = 1.1, adaround_gamma = -0.1;

inline at::Tensor soft_rounding(const at::Tensor& v) {
    return at::clamp(at::sigmoid(v) * (adaround_zeta - adaround_gamma) + adaround_gamma, 0.0, 1.0);
}

}  // namespace detail

// AdaRound on the weight matrices of a layer's groups, [groups, rows, width], each with its input
// H [groups, width, width] (as gptq_round takes them). Returns the rounded matrices, every entry on
// `grid` (scale and zero point [groups x rows] or [1]) and each the level below or above its
// weight (clamped to the grid's range).
inline at::Tensor adaround_round(const at::Tensor& weight, const at::Tensor& hessian, const weight_grid& grid,
                                 const adaround_options& options = {}) {
    const std::int64_t groups = weight.size(0), rows = weight.size(1);
    const at::Tensor w = weight.to(at::kDouble);
    const at::Tensor h_matrix = hessian.to(at::kDouble);
    const at::Tensor scale = grid.scale.to(at::kDouble).expand({groups * rows}).reshape({groups, rows, 1});
    const at::Tensor zero_point = grid.zero_point.to(at::kDouble).expand({groups * rows}).reshape({groups, rows, 1});
    const at::Tensor scaled = w / scale;
    const at::Tensor floor = at::floor(scaled);
    // Levels below and above each weight, on the grid's range, relative to the zero point.
    const at::Tensor low = floor + zero_point, high = floor + 1 + zero_point;
    const auto on_grid = [&](const at::Tensor& level) {
        return (at::clamp(level, grid.quant_min, grid.quant_max) - zero_point) * scale;
    };
    const at::Tensor nearest = on_grid(at::round(scaled) + zero_point);
    const double nearest_error = detail::output_error(w - nearest, h_matrix);
    if (nearest_error <= 0) return nearest.to(weight.scalar_type());

    // V such that h(V) is each weight's fractional part: the soft weights start at the float ones.
    const at::Tensor fraction = at::clamp(scaled - floor, 1e-4, 1 - 1e-4);
    at::Tensor v = -at::log((detail::adaround_zeta - detail::adaround_gamma) / (fraction - detail::adaround_gamma) - 1);
    v = v.detach().clone().set_requires_grad(true);
    ::torch::optim::Adam adam({v}, ::torch::optim::AdamOptions(options.learning_rate));
    const std::int64_t warm_up = static_cast<std::int64_t>(options.warm_up * static_cast<double>(options.iterations));
    for (std::int64_t step = 0; step < options.iterations; ++step) {
        adam.zero_grad();
        const at::Tensor soft = on_grid(low + detail::soft_rounding(v));
        const at::Tensor error = w - soft;
        at::Tensor loss = at::sum(at::bmm(error, h_matrix) * error) / nearest_error;
        if (step >= warm_up) {
            const double progress = static_cast<double>(step - warm_up) /
                                    static_cast<double>(std::max<std::int64_t>(1, options.iterations - warm_up));
            const double beta = options.beta_start + (options.beta_end - options.beta_start) * progress;
            const at::Tensor binary = at::abs(2 * detail::soft_rounding(v) - 1).pow(beta);
            loss = loss + options.regularization * at::mean(1 - binary);
        }
        loss.backward();
        adam.step();
    }
    const ::torch::NoGradGuard no_grad;
    return on_grid(at::where(detail::soft_rounding(v) >= 0.5, high, low)).to(weight.scalar_type());
}

// AdaRound on the layers of `reference` (prepare's float model) that `in_scope` selects, in `prepared`
// (calibrated, not converted), with H from `calibration`.
template <class InScope>
rounding_summary adaround_weights(prepared_model& prepared, const ::torch::jit::Module& reference,
                                  const std::vector<batch>& calibration, InScope&& in_scope,
                                  const adaround_options& options = {}) {
    return detail::round_layers(prepared, reference, calibration, in_scope, options.max_samples,
                                [&](const at::Tensor& matrices, const at::Tensor& hessian, const weight_grid& grid,
                                    std::string& why_not) -> std::optional<at::Tensor> {
                                    const double cost = static_cast<double>(matrices.numel()) *
                                                        static_cast<double>(matrices.size(2));
                                    if (cost > options.max_step_cost) {
                                        char reason[200];
                                        std::snprintf(reason, sizeof reason,
                                                      "its size (%lld rows of width %lld) makes a step cost %.2g "
                                                      "multiply-adds, above the bound of %.2g (gptq has none)",
                                                      static_cast<long long>(matrices.size(0) * matrices.size(1)),
                                                      static_cast<long long>(matrices.size(2)), cost,
                                                      options.max_step_cost);
                                        why_not = reason;
                                        return std::nullopt;
                                    }
                                    return adaround_round(matrices, hessian, grid, options);
                                });
}

// The sequence's step for the adaround option (accuracy/steps.hpp): on the calibrated model, before
// convert; the report notes per target how the layers' output errors moved, and each layer's.
struct adaround_step {
    static bool applies(const target_plan& target) { return target.adarounds_weights; }
    static void run(prepared_model& calibrated, const std::vector<batch>& calibration) {
        const quantization_plan& plan = calibrated.plan;
        if (!calibrated.folded_model) return;
        const auto in_scope = [&](const std::string& path) {
            return plan.target_with(path, &target_plan::adarounds_weights).has_value();
        };
        detail::note_rounding(calibrated, adaround_weights(calibrated, *calibrated.folded_model, calibration, in_scope),
                              &target_plan::adarounds_weights, "adaround", true);
    }
};

}  // namespace versatil::libtorch
