// calibrate: runs batches through a prepared model without gradients so its observers learn
// activation ranges. Each batch is checked first; a bad one is rejected by its index, before
// it can poison an observer.
#pragma once

#include <torch/script.h>

#include <string>
#include <vector>

#include "versatil/torch/error.hpp"
#include "versatil/torch/prepare.hpp"
#include "versatil/torch/progress.hpp"

namespace versatil::libtorch {

inline std::string describe_shape(const at::Tensor& tensor) {
    std::string text = "[";
    for (std::int64_t i = 0; i < tensor.dim(); ++i) text += (i ? ", " : "") + std::to_string(tensor.size(i));
    return text + "] " + std::string(c10::toString(tensor.scalar_type()));
}

// Rejects what would corrupt observers or crash the model, naming the batch.
inline void check_batch(const at::Tensor& batch, std::size_t index, const char* what = "calibration batch") {
    const std::string name = std::string(what) + " " + std::to_string(index);
    if (!batch.defined() || batch.numel() == 0)
        throw error(error_kind::invalid_calibration_data, name + " is empty; give batches with at least one sample");
    if (!at::isFloatingType(batch.scalar_type()))
        throw error(error_kind::invalid_calibration_data,
                    name + " has dtype " + std::string(c10::toString(batch.scalar_type())) +
                        "; the model takes floating-point input");
    if (!at::isfinite(batch).all().item<bool>())
        throw error(error_kind::invalid_calibration_data,
                    name + " holds NaN or Inf values; clean or drop that batch before calibrating");
}

// Splits a tensor batched along dim 0 into batches of at most `batch_size` rows.
inline std::vector<at::Tensor> split_batches(const at::Tensor& data, std::int64_t batch_size) {
    if (!data.defined() || data.dim() == 0) return {};
    std::vector<at::Tensor> batches;
    for (std::int64_t start = 0; start < data.size(0); start += batch_size)
        batches.push_back(data.slice(0, start, std::min(start + batch_size, data.size(0))));
    return batches;
}

struct calibration_options {
    bool progress = true;  // drawn only on a terminal
};

inline void calibrate(prepared_model& prepared, const std::vector<at::Tensor>& batches,
                      const calibration_options& options = {}) {
    if (batches.empty()) {
        if (prepared.quantizer.needs_calibration())
            throw error(error_kind::no_calibration_data,
                        "static quantization needs calibration batches to learn activation ranges; give some "
                        "(the data file's 'calib' tensor) or use a dynamic backend option");
        return;
    }
    for (std::size_t i = 0; i < batches.size(); ++i) check_batch(batches[i], i);
    const ::torch::NoGradGuard no_grad;
    progress_bar bar("calibrating", static_cast<std::int64_t>(batches.size()), options.progress);
    for (std::size_t i = 0; i < batches.size(); ++i) {
        try {
            prepared.module.forward({batches[i]});
        } catch (const c10::Error& failure) {
            throw error(error_kind::invalid_calibration_data,
                        "calibration batch " + std::to_string(i) + " (" + describe_shape(batches[i]) +
                            ") does not fit the model: " + first_line(failure.what_without_backtrace()));
        } catch (const std::runtime_error& failure) {  // TorchScript's own exceptions
            throw error(error_kind::invalid_calibration_data, "calibration batch " + std::to_string(i) + " (" +
                                                                  describe_shape(batches[i]) +
                                                                  ") does not fit the model: " +
                                                                  first_line(failure.what()));
        }
        bar.update(static_cast<std::int64_t>(i + 1));
    }
}

}  // namespace versatil::libtorch
