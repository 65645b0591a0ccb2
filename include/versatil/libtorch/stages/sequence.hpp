// The one stage sequence: the data's input types conformed to the model's, then prepare (with
// cross-layer equalization), calibrate (or train, for QAT targets), the accuracy steps of the
// calibrated model (GPTQ), convert, those of the converted model (bias correction) and lower
// (accuracy/steps.hpp lists the steps); dynamic targets straight into the lowered module where
// the direct path covers the model (dynamic.hpp). Every entry point runs it, as far as it needs:
// quantize_model and quantize() (analysis/measure.hpp) to the end, measure()'s per-layer analysis
// to the converted model, calibrate_only to the calibrated one. How it calibrates (or trains) is a
// policy type the entry points take, chosen while compiling: this process alone (this_process),
// or with others (distributed/across_processes.hpp).
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/accuracy/steps.hpp"
#include "versatil/libtorch/stages/calibrate.hpp"
#include "versatil/libtorch/stages/convert.hpp"
#include "versatil/libtorch/stages/dynamic.hpp"
#include "versatil/libtorch/stages/lower.hpp"
#include "versatil/libtorch/stages/prepare.hpp"
#include "versatil/libtorch/stages/qat.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"

namespace versatil::libtorch {

inline constexpr std::int64_t automatic_per_layer_samples = -1;  // per_layer_samples: per_layer_budget chooses

struct quantize_options {
    std::int64_t batch_size = 1;  // for latency
    int threads = 1;              // for latency and lowering
    bool per_layer = true;        // per-layer SQNR (one evaluation pass per layer; not for QAT)
    bool progress = true;
    qat_options qat{};            // QAT targets: how to train
    // Evaluation samples the per-layer analysis runs each layer on: automatic_per_layer_samples
    // (the default) for about one evaluation pass in all (analysis/sensitivity.hpp, per_layer_budget),
    // 0 for all of them, N for the first N.
    std::int64_t per_layer_samples = automatic_per_layer_samples;
};

// How the sequence fills a prepared model's observers: calibrate on batches, or train its QAT
// targets. `progress` is the run's wish to draw bars. The per-layer analysis starts from the
// model the policy calibrated.
template <class Policy>
concept calibration_policy = requires(Policy& policy, prepared_model& prepared, const std::vector<batch>& batches,
                                      const at::Tensor& tensor, const qat_options& qat) {
    policy.calibrate(prepared, batches, true);
    { policy.train(prepared, tensor, tensor, qat) } -> std::same_as<qat_result>;
};

// Everything in this process: calibrate() and train_qat().
struct this_process {
    static void calibrate(prepared_model& prepared, const std::vector<batch>& batches, bool progress) {
        libtorch::calibrate(prepared, batches, {progress});
    }
    static qat_result train(prepared_model& prepared, const at::Tensor& images, const at::Tensor& labels,
                            const qat_options& qat) {
        return train_qat(prepared, images, labels, qat);
    }
};
static_assert(calibration_policy<this_process>);

namespace detail {

// Calibrates `prepared` on data.calibration, or trains it, for QAT targets, on data.train_inputs
// and train_labels, as `policy` does.
template <calibration_policy Policy>
std::optional<qat_result> calibrate_or_train(prepared_model& prepared, const quantize_data& data,
                                             const quantize_options& options, Policy& policy) {
    if (prepared.plan.quantizer.is_qat()) {
        if (!data.train_inputs || !data.train_labels)
            throw error(error_kind::no_training_data,
                        "QAT targets train before converting: give training samples and labels (the data file's "
                        "'train_inputs' and 'train_labels')");
        qat_options qat = options.qat;
        qat.progress = qat.progress && options.progress;
        return policy.train(prepared, *data.train_inputs, *data.train_labels, qat);
    }
    policy.calibrate(prepared, data.calibration, options.progress);
    return std::nullopt;
}

// The floating-point type the model computes in: that of its first floating parameter or
// buffer (none for a model without any).
inline std::optional<at::ScalarType> model_float_type(const ::torch::jit::Module& model) {
    for (const at::Tensor& parameter : model.parameters())
        if (at::isFloatingType(parameter.scalar_type())) return parameter.scalar_type();
    for (const at::Tensor& buffer : model.buffers())
        if (at::isFloatingType(buffer.scalar_type())) return buffer.scalar_type();
    return std::nullopt;
}

// Floating inputs of another type than the model's (a float64 data file for a float32
// model) are converted to the model's, with one note per input and type.
inline void conform_input_types(const ::torch::jit::Module& model, std::vector<batch>& batches, const char* what,
                                std::vector<adjustment>& notes) {
    const std::optional<at::ScalarType> model_type = model_float_type(model);
    if (!model_type) return;
    std::vector<std::string> noted;
    for (batch& inputs : batches) {
        std::vector<at::Tensor> converted = inputs.inputs();
        bool changed = false;
        for (std::size_t i = 0; i < converted.size(); ++i) {
            const at::ScalarType type = converted[i].scalar_type();
            if (!at::isFloatingType(type) || type == *model_type) continue;
            const std::string note = std::string(what) + (converted.size() > 1 ? " input " + std::to_string(i) : "") +
                                     " converted from " + c10::toString(type) + " to the model's " +
                                     c10::toString(*model_type);
            if (std::find(noted.begin(), noted.end(), note) == noted.end()) noted.push_back(note);
            converted[i] = converted[i].to(*model_type);
            changed = true;
        }
        if (changed) inputs = batch(std::move(converted));
    }
    for (const std::string& note : noted) notes.push_back({"", note});
}

// How far the sequence runs: measure() conforms only, or converts for its per-layer analysis;
// calibrate_only stops once calibrated (or trained).
enum class run_until { conformed, calibrated, converted, lowered };

// What the sequence leaves: the data as the stages saw it, and the models its caller reads.
struct stage_results {
    quantize_data data;                        // input types conformed to the model's
    std::vector<adjustment> input_notes;       // what conforming converted
    std::optional<qat_result> training;        // QAT targets: what training did
    std::optional<converted_model> converted;  // run_until::converted, or lowered with options.per_layer
    std::optional<lowered_model> lowered;      // run_until::lowered
    double seconds = 0.0;
};

// `steps`: the accuracy steps to run where they belong (accuracy/steps.hpp); `policy`: how to
// calibrate or train.
template <class Steps = decltype(accuracy_steps), calibration_policy Policy = this_process>
stage_results run_sequence(const ::torch::jit::Module& model, const quantization_plan& plan, quantize_data data,
                           const quantize_options& options, run_until until = run_until::lowered, Steps steps = {},
                           Policy&& policy = {}) {
    const auto start = std::chrono::steady_clock::now();
    stage_results done{std::move(data), {}, std::nullopt, std::nullopt, std::nullopt};
    conform_input_types(model, done.data.calibration, "calibration data", done.input_notes);
    conform_input_types(model, done.data.evaluation, "evaluation data", done.input_notes);
    lowering_options lowering{.sample = std::nullopt, .threads = options.threads};
    if (!done.data.calibration.empty()) lowering.sample = done.data.calibration.front();
    else if (!done.data.evaluation.empty()) lowering.sample = done.data.evaluation.front();
    if (until == run_until::lowered)
        done.lowered = lower_dynamic_directly(model, plan, lowering, done.data.calibration);
    if (until != run_until::conformed && !done.lowered) {
        prepared_model prepared = prepare(model, plan);
        done.training = calibrate_or_train(prepared, done.data, options, policy);
        if (until == run_until::calibrated) return done;
        const auto convert_stage = [](prepared_model&& copy) { return convert(std::move(copy)); };
        if (!done.training) run_steps_at(prepared, done.data.calibration, steps, convert_stage);
        // Each stage takes over the model of the one before (no copy of the weights) unless the
        // per-layer analysis reads the converted model after lowering.
        converted_model converted = convert(std::move(prepared));
        run_steps_at(converted, done.data.calibration, steps, convert_stage);
        if (until == run_until::lowered && (done.training || !options.per_layer))
            done.lowered = lower(std::move(converted), lowering);
        else if (until == run_until::lowered)
            done.lowered = lower(converted, lowering);
        if (!done.lowered || (!done.training && options.per_layer)) done.converted = std::move(converted);
    }
    done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return done;
}

}  // namespace detail

// prepare, calibrate (or train, for QAT targets) as `policy` does, convert and lower, with
// nothing measured. Calls from several threads take turns (engine.hpp).
template <calibration_policy Policy = this_process>
lowered_model quantize_model(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                             const quantize_data& data, const quantize_options& options = {}, Policy&& policy = {}) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    return std::move(*detail::run_sequence(model, plan_for(quantizer), data, options, detail::run_until::lowered,
                                           accuracy_steps, policy)
                          .lowered);
}

// Prepares and calibrates (trains, for QAT targets) as quantize does, and stops there: for a
// process that only contributes observer statistics or gradients (`policy`,
// distributed/across_processes.hpp) to another that converts, measures and writes (distributed
// ranks other than 0).
template <calibration_policy Policy>
void calibrate_only(const ::torch::jit::Module& model, const runtime_quantizer& quantizer, const quantize_data& data,
                    const quantize_options& options, Policy&& policy) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    (void)detail::run_sequence(model, plan_for(quantizer), data, options, detail::run_until::calibrated,
                               accuracy_steps, policy);
}

}  // namespace versatil::libtorch
