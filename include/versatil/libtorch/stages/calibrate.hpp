// calibrate: runs batches through a prepared model without gradients so its observers learn
// activation ranges. Each batch is checked first; a bad one is rejected by its index, before
// it can poison an observer.
#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/stages/prepare.hpp"
#include "versatil/libtorch/torchscript/progress.hpp"

namespace versatil::libtorch {

namespace detail {

// Rejects what would corrupt observers or crash the model, naming the batch. Integer inputs
// (token ids, indices) are data like any other: they have no NaN to check.
inline void check_batch(const batch& inputs, std::size_t index, const char* what = "calibration batch") {
    const std::string name = std::string(what) + " " + std::to_string(index);
    for (std::size_t i = 0; i < inputs.arity(); ++i) {
        const at::Tensor& input = inputs.input(i);
        const std::string which = inputs.arity() == 1 ? name : name + " input " + std::to_string(i);
        if (!input.defined() || input.numel() == 0)
            throw error(error_kind::invalid_calibration_data,
                        which + " is empty; give batches with at least one sample");
        if (at::isComplexType(input.scalar_type()))
            throw error(error_kind::invalid_calibration_data,
                        which + " has dtype " + std::string(c10::toString(input.scalar_type())) +
                            "; quantized models take real-valued or integer input");
        if (at::isFloatingType(input.scalar_type()) && !at::isfinite(input).all().item<bool>())
            throw error(error_kind::invalid_calibration_data,
                        which + " holds NaN or Inf values; clean or drop that batch before calibrating");
    }
}

}  // namespace detail

struct calibration_options {
    bool progress = true;  // drawn only on a terminal
};

inline void calibrate(prepared_model& prepared, const std::vector<batch>& batches,
                      const calibration_options& options = {}) {
    if (batches.empty()) {
        if (prepared.plan.quantizer.needs_calibration())
            throw error(error_kind::no_calibration_data,
                        "static quantization needs calibration batches to learn activation ranges; give some "
                        "(the data file's 'calib' tensor) or use a dynamic backend option");
        return;
    }
    for (std::size_t i = 0; i < batches.size(); ++i) detail::check_batch(batches[i], i);
    const ::torch::NoGradGuard no_grad;
    // Each graph runs a few times only: LibTorch's profiling executor would spend longer
    // optimizing the prepared model's graphs (and respecializing the observers' shared graphs
    // for every tensor shape they see) than running them.
    const ::torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
    progress_bar bar("calibrating", static_cast<std::int64_t>(batches.size()), options.progress);
    for (std::size_t i = 0; i < batches.size(); ++i) {
        const auto does_not_fit = [&](const std::exception& failure) {
            return error(error_kind::invalid_calibration_data,
                         "calibration batch " + std::to_string(i) + " (" + detail::describe_shape(batches[i]) +
                             ") does not fit the model: " + one_line(failure));
        };
        try {
            prepared.module.forward(batches[i].arguments());
        } catch (const c10::Error& failure) {
            throw does_not_fit(failure);
        } catch (const std::runtime_error& failure) {  // TorchScript's own exceptions
            throw does_not_fit(failure);
        }
        bar.update(static_cast<std::int64_t>(i + 1));
    }
}

}  // namespace versatil::libtorch
