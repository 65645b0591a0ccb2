// The whole flow, prepare -> calibrate -> convert -> lower, and the report that measures the
// result against the float model.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "versatil/libtorch/stages/calibrate.hpp"
#include "versatil/libtorch/stages/convert.hpp"
#include "versatil/libtorch/stages/dynamic.hpp"
#include "versatil/libtorch/analysis/dynamic_switches.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/stages/lower.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/stages/prepare.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"
#include "versatil/libtorch/stages/qat.hpp"
#include "versatil/libtorch/analysis/report.hpp"
#include "versatil/libtorch/analysis/sensitivity.hpp"
#include "versatil/libtorch/plan/target_spec.hpp"

namespace versatil::libtorch {

struct quantize_data {
    std::vector<batch> calibration{};               // batches; static targets need at least one
    std::vector<batch> evaluation{};                // held-out batches; calibration data when empty
    std::optional<at::Tensor> evaluation_labels{};  // int64 class labels for every evaluation sample
    std::optional<at::Tensor> train_inputs{};       // QAT: training samples, batched along dim 0
    std::optional<at::Tensor> train_labels{};       // QAT: their int64 class labels
};

struct quantize_options {
    std::int64_t batch_size = 1;  // for latency
    int threads = 1;              // for latency and lowering
    bool per_layer = true;        // per-layer SQNR (one evaluation pass per layer; not for QAT)
    bool progress = true;
    qat_options qat{};            // QAT targets: how to train
    // Calibrates in place of calibrate(prepared, batches) when set: distributed calibration
    // (libtorch/distributed/calibrate_distributed.hpp) observes a shard and merges across processes.
    // The per-layer analysis starts from the model this calibrated.
    std::function<void(prepared_model&, const std::vector<batch>&)> calibrate_with{};
    // Trains QAT targets in place of train_qat when set: distributed QAT
    // (libtorch/distributed/qat.hpp) trains a slice of each batch and averages across processes.
    std::function<qat_result(prepared_model&, const at::Tensor& images, const at::Tensor& labels, const qat_options&)>
        train_with{};
    // Evaluation samples the per-layer analysis runs each layer on: automatic_per_layer_samples
    // (the default) for about one evaluation pass in all (sensitivity.hpp, per_layer_budget),
    // 0 for all of them, N for the first N. Last, so that positional initialisers written
    // before it still mean what they meant.
    std::int64_t per_layer_samples = automatic_per_layer_samples;
};

struct quantization_result {
    lowered_model model;
    quantization_report report;
};

namespace detail {

struct quantized {
    lowered_model model;
    std::optional<qat_result> training;  // QAT targets: what training did
    std::optional<converted_model> converted;  // post-training: what lower() lowered (per-layer analysis)
};

// Calibrates `prepared` on data.calibration, or trains it, for QAT targets, on data.train_inputs
// and train_labels; options.calibrate_with / train_with in place of calibrate / train_qat.
inline std::optional<qat_result> calibrate_or_train(prepared_model& prepared, const quantize_data& data,
                                                    const quantize_options& options) {
    if (prepared.plan.quantizer.is_qat()) {
        if (!data.train_inputs || !data.train_labels)
            throw error(error_kind::no_training_data,
                        "QAT targets train before converting: give training samples and labels (the data file's "
                        "'train_inputs' and 'train_labels')");
        qat_options qat = options.qat;
        qat.progress = qat.progress && options.progress;
        if (options.train_with) return options.train_with(prepared, *data.train_inputs, *data.train_labels, qat);
        return train_qat(prepared, *data.train_inputs, *data.train_labels, qat);
    }
    if (options.calibrate_with)
        options.calibrate_with(prepared, data.calibration);
    else
        calibrate(prepared, data.calibration, {options.progress});
    return std::nullopt;
}

// prepare (with cross-layer equalization), calibrate (or train, for QAT targets), round weights
// (GPTQ), convert, correct biases and lower; dynamic targets straight into the lowered module where the direct
// path covers the model (dynamic.hpp).
inline quantized run_stages(const ::torch::jit::Module& model, const quantization_plan& plan, const quantize_data& data,
                            const quantize_options& options) {
    lowering_options lowering{.sample = std::nullopt, .threads = options.threads};
    if (!data.calibration.empty()) lowering.sample = data.calibration.front();
    else if (!data.evaluation.empty()) lowering.sample = data.evaluation.front();
    if (std::optional<lowered_model> direct = lower_dynamic_directly(model, plan, lowering))
        return {std::move(*direct), std::nullopt, std::nullopt};
    prepared_model prepared = prepare(model, plan);
    std::optional<qat_result> training = calibrate_or_train(prepared, data, options);
    if (!training) round_weights_for_targets(prepared, data.calibration);
    // Each stage takes over the model of the one before (no copy of the weights) unless the
    // per-layer analysis reads the converted model after lowering.
    converted_model converted = convert(std::move(prepared));
    correct_biases_for_targets(converted, data.calibration);
    if (training || !options.per_layer) return {lower(std::move(converted), lowering), std::move(training), std::nullopt};
    lowered_model lowered = lower(converted, lowering);
    return {std::move(lowered), std::nullopt, std::move(converted)};
}

// Output SQNR against `reference` with `layer` alone quantized: prepared, calibrated on
// `calibration` (dynamic targets take none), converted and lowered on its own, then one pass
// over `evaluation`.
inline double sqnr_quantized_alone(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                   const std::string& layer, const quantize_data& calibration,
                                   const model_outputs& reference, const std::vector<batch>& evaluation, int threads) {
    auto alone = runtime_quantizer::compose({{layer, quantizer.quantizer_for(layer)->backend}});
    if (!alone) throw error(error_kind::invalid_argument, alone.error().message);
    const lowered_model lowered =
        run_stages(model, plan_for(*alone), calibration, {.threads = threads, .per_layer = false, .progress = false}).model;
    const engine_scope engine(engine_settings{lowered.plan.engine, threads, std::nullopt});
    return compare_outputs(reference, run_batches(lowered.module, evaluation)).overall.sqnr_db;
}

// The per-layer analysis (report.per_layer): output SQNR against the float `model` on
// `evaluation` with only each layer quantized, worst first. Static targets switch each layer's
// quantize ops on in `converted`, the model of the one calibration (sensitivity.hpp): one
// evaluation pass per layer; dynamic targets switch each layer's linear ops on in the direct
// path's model (dynamic_switches.hpp), one evaluation pass per layer too. Where that cannot
// stand for the layer quantized alone (a static layer's input on a grid observed elsewhere, as
// after average pooling; a dynamic model beyond the direct path, or with the cle option), the
// layer is quantized alone, calibrated on the first 8 calibration batches as the analysis
// always did.
// Each layer is evaluated on the first samples of `evaluation` that `requested_samples` asks
// for (quantize_options::per_layer_samples); `reference_outputs`, when given, are the float
// model's on all of `evaluation` (measure() has them), used when every sample is.
struct per_layer_analysis {
    std::vector<layer_sqnr> layers;  // worst first
    std::int64_t samples = 0;        // evaluated per layer
};

inline per_layer_analysis per_layer_sqnr(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                         const ::torch::jit::Module* converted, const std::vector<batch>& calibration,
                                         const std::vector<batch>& all_evaluation, int threads,
                                         std::int64_t requested_samples = automatic_per_layer_samples,
                                         const model_outputs* reference_outputs = nullptr) {
    const std::vector<std::string> layers = analysed_layers(model, quantizer);
    const std::int64_t all_samples = samples_in(all_evaluation);
    const std::vector<batch> evaluation = first_samples(
        all_evaluation, requested_samples == automatic_per_layer_samples ? per_layer_budget(all_samples, layers.size())
                                                                         : requested_samples);
    const std::int64_t samples = samples_in(evaluation);
    const model_outputs reference =
        reference_outputs && samples == all_samples ? *reference_outputs : run_batches(model, evaluation);
    quantize_data subset;
    if (!quantizer.is_dynamic())
        subset.calibration.assign(calibration.begin(),
                                  calibration.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(calibration.size(), 8)));
    std::optional<switchable_quantization> switchable;
    std::optional<switchable_dynamic_quantization> dynamic_switches;
    if (!quantizer.is_dynamic()) {
        if (!converted) throw error(error_kind::invalid_argument, "per_layer_sqnr: static targets need the converted model");
        switchable.emplace(*converted, layers, ::torch::jit::QuantType::STATIC);
    } else {
        dynamic_switches = switchable_dynamic_quantization::make(model, plan_for(quantizer), layers);
    }
    // Output SQNR of the switched model (static or dynamic) with `layer`'s switches on.
    const auto switched_on = [&](auto& switches, const std::string& layer) {
        switches.quantize_layer(layer, true);
        const double sqnr_db = compare_outputs(reference, run_batches(switches.module(), evaluation)).overall.sqnr_db;
        switches.quantize_layer(layer, false);
        return sqnr_db;
    };
    std::vector<layer_sqnr> result;
    for (const std::string& layer : layers) {
        if (dynamic_switches) {
            const engine_scope engine(engine_settings{dynamic_switches->engine(), threads, std::nullopt});
            result.push_back({layer, switched_on(*dynamic_switches, layer)});
        } else if (switchable && switchable->stands_for_alone(layer)) {
            result.push_back({layer, switched_on(*switchable, layer)});
        } else {
            result.push_back({layer, sqnr_quantized_alone(model, quantizer, layer, subset, reference, evaluation, threads)});
        }
    }
    std::sort(result.begin(), result.end(), [](const layer_sqnr& a, const layer_sqnr& b) { return a.sqnr_db < b.sqnr_db; });
    return {std::move(result), samples};
}

// `batch_size` rows of evaluation data (repeated if there are fewer) for timing.
inline batch timing_batch(const std::vector<batch>& batches, std::int64_t batch_size) {
    std::vector<at::Tensor> inputs = concatenate(batches);
    for (at::Tensor& input : inputs) {
        while (input.size(0) < batch_size) input = at::cat({input, input});
        input = input.slice(0, 0, batch_size).contiguous();
    }
    return batch(std::move(inputs));
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

}  // namespace detail

// prepare, calibrate (or train, for QAT targets), convert and lower, with nothing measured.
// Calls from several threads take turns (engine.hpp).
inline lowered_model quantize_model(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                    const quantize_data& data, const quantize_options& options = {}) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    return detail::run_stages(model, plan_for(quantizer), data, options).model;
}

namespace detail {

// measure(), with the converted model the per-layer analysis starts from when the caller has
// it (quantize() does; otherwise the model is prepared, calibrated and converted here, once).
inline quantization_report measure(const ::torch::jit::Module& model, const lowered_model& lowered,
                                   const quantize_data& data, const quantize_options& options,
                                   const converted_model* converted) {
    const runtime_quantizer& quantizer = lowered.plan.quantizer;
    quantization_report report;
    for (const target_info& target : quantizer.target_infos())
        report.targets.push_back({std::string(target.path), backend_shown(target),
                                  target.is_exclude() ? "" : std::string(target.backend->options),
                                  target.is_exclude() ? "" : calibration_shown(*target.backend)});
    report.engine = engine_name(lowered.plan.engine);
    report.adjustments = lowered.adjustments;
    report.quantizable_kind = quantizer.is_dynamic() ? "linear" : "conv/linear";
    report.float_bytes = serialized_bytes(model);
    report.quantized_bytes = serialized_bytes(lowered.module);

    report.held_out = !data.evaluation.empty();
    const std::vector<batch>& evaluation = report.held_out ? data.evaluation : data.calibration;
    if (evaluation.empty())
        throw error(error_kind::no_evaluation_data,
                    "nothing to measure the quantized model on: give evaluation batches (the data file's 'test') or "
                    "calibration batches");
    for (std::size_t i = 0; i < evaluation.size(); ++i) detail::check_batch(evaluation[i], i, "evaluation batch");

    // Measured on an eval-mode clone: a model left in train mode would update its batch-norm
    // statistics, and the caller's model is never modified.
    ::torch::jit::Module float_model = private_clone(model);
    float_model.eval();
    const engine_scope engine(engine_settings{lowered.plan.engine, options.threads, std::nullopt});
    const model_outputs reference = run_batches(float_model, evaluation);
    // Measured on deep copies (fresh packed weights): oneDNN's quantized conv keeps the primitive
    // of its first input shape, and the returned model should keep none. The engine can still
    // fail here, on data lower()'s check did not run (another batch size or shape): that is
    // lowering_failed too, not a bare LibTorch exception.
    const auto on_lowered = [&](const auto& run) {
        try {
            return run(lowered.module.deepcopy());
        } catch (const error&) {
            throw;
        } catch (const std::exception& failure) {
            throw detail::engine_failure(lowered.plan, failure);
        }
    };
    const model_outputs quantized = on_lowered([&](const ::torch::jit::Module& copy) { return run_batches(copy, evaluation); });
    // Op counts: what one evaluation batch runs, on the float model as quantization sees it
    // (eval mode, inference branches) and on the lowered model.
    ::torch::jit::Module specialized = float_model.clone();
    if (!quantizer.is_qat()) specialize_for_inference(specialized);
    report.quantizable_ops =
        count_ops(executed_ops(specialized, evaluation.front()), quantizable_op_test(quantizer.is_dynamic()));
    report.quantized_ops = count_ops(
        on_lowered([&](const ::torch::jit::Module& copy) { return executed_ops(copy, evaluation.front()); }), is_quantized_op);
    report.evaluation_samples = samples_in(evaluation);
    const outputs_comparison comparison = compare_outputs(reference, quantized);
    report.max_abs_diff = comparison.overall.max_abs_diff;
    report.mean_abs_diff = comparison.overall.mean_abs_diff;
    report.sqnr_db = comparison.overall.sqnr_db;
    if (comparison.outputs.size() > 1) report.outputs = comparison.outputs;
    if (data.evaluation_labels && report.held_out) {
        report.float_accuracy = top1_accuracy(reference, *data.evaluation_labels);
        report.quantized_accuracy = top1_accuracy(quantized, *data.evaluation_labels);
    }

    report.batch_size = options.batch_size;
    report.threads = options.threads;
    const batch timing = detail::timing_batch(evaluation, options.batch_size);
    report.float_ms = median_latency_ms(float_model, timing);
    report.quantized_ms = on_lowered([&](const ::torch::jit::Module& copy) { return median_latency_ms(copy, timing); });

    // Per-layer analysis: static targets quantize each layer alone in the converted model of the
    // one calibration (sensitivity.hpp); dynamic ones in the direct path's model, whose weights
    // are packed once (dynamic_switches.hpp). QAT has nothing to start from before training (it would
    // mean training once per layer), so it is left to post-training runs.
    if (options.per_layer && !quantizer.is_qat()) {
        std::optional<converted_model> own;
        if (!converted && !quantizer.is_dynamic()) {
            prepared_model prepared = prepare(model, lowered.plan);
            calibrate(prepared, data.calibration, {false});
            own.emplace(convert(prepared));
            correct_biases_for_targets(*own, data.calibration);
            converted = &*own;
        }
        per_layer_analysis analysis =
            per_layer_sqnr(float_model, quantizer, converted ? &converted->module : nullptr, data.calibration, evaluation,
                           options.threads, options.per_layer_samples, &reference);
        report.per_layer = std::move(analysis.layers);
        report.per_layer_samples = analysis.samples;
    }
    return report;
}

}  // namespace detail

// The report's measurements of any lowered model against the float `model` it came from, on
// `data`'s evaluation batches (its calibration batches when it has none): outputs, op counts,
// size, latency, top-1 with labels, and per-layer SQNR when options.per_layer is set.
inline quantization_report measure(const ::torch::jit::Module& model, const lowered_model& lowered,
                                   const quantize_data& data, const quantize_options& options = {}) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    return detail::measure(model, lowered, data, options, nullptr);
}

namespace detail {

struct quantized_and_measured {
    quantization_result result;
    std::optional<converted_model> converted;  // post-training: the model of the one calibration
};

// quantize(), keeping the converted model: the accuracy target's greedy search switches its
// quantize ops (sensitivity.hpp) instead of calibrating again per candidate.
inline quantized_and_measured quantize_keeping_converted(const ::torch::jit::Module& model,
                                                         const runtime_quantizer& quantizer, const quantize_data& data,
                                                         const quantize_options& options) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    const auto start = std::chrono::steady_clock::now();
    quantize_data conformed = data;
    std::vector<adjustment> input_notes;
    detail::conform_input_types(model, conformed.calibration, "calibration data", input_notes);
    detail::conform_input_types(model, conformed.evaluation, "evaluation data", input_notes);
    detail::quantized done = detail::run_stages(model, plan_for(quantizer), conformed, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    quantization_report report =
        detail::measure(model, done.model, conformed, options, done.converted ? &*done.converted : nullptr);
    report.quantize_seconds = seconds;
    if (!quantizer.is_qat()) {
        report.samples_per_rank = {samples_in(conformed.calibration)};  // distributed calibration replaces it with each rank's
    }
    report.adjustments.insert(report.adjustments.begin(), input_notes.begin(), input_notes.end());
    const std::vector<adjustment> idle_targets = targets_without_layers(model, quantizer);
    report.adjustments.insert(report.adjustments.begin(), idle_targets.begin(), idle_targets.end());
    if (done.training) {
        // The examples trained on, steps x batch; distributed QAT replaces it with each rank's slice.
        const std::int64_t batch_size = std::min(options.qat.training.batch_size, conformed.train_inputs->size(0));
        report.samples_per_rank = {batch_size * static_cast<std::int64_t>(done.training->training.losses.size())};
        report.qat_steps = static_cast<std::int64_t>(done.training->training.losses.size());
        report.qat_seconds = done.training->seconds;
        report.qat_final_loss = done.training->training.final_loss;
    }
    return {{std::move(done.model), std::move(report)}, std::move(done.converted)};
}

}  // namespace detail

// Quantizes and measures. Calls from several threads take turns (engine.hpp).
inline quantization_result quantize(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                    const quantize_data& data, const quantize_options& options = {}) {
    return detail::quantize_keeping_converted(model, quantizer, data, options).result;
}

// Prepares and calibrates (trains, for QAT targets) as quantize does, and stops there: for a
// process that only contributes observer statistics or gradients (options.calibrate_with,
// train_with) to another that converts, measures and writes (distributed ranks other than 0).
inline void calibrate_only(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                           const quantize_data& data, const quantize_options& options) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    quantize_data conformed = data;
    std::vector<adjustment> notes;
    detail::conform_input_types(model, conformed.calibration, "calibration data", notes);
    prepared_model prepared = prepare(model, plan_for(quantizer));
    (void)detail::calibrate_or_train(prepared, conformed, options);
}

template <class... Targets>
quantization_result quantize(const ::torch::jit::Module& model, Quantizer<Targets...> quantizer,
                             const quantize_data& data, const quantize_options& options = {}) {
    return quantize(model, to_runtime(quantizer), data, options);
}

}  // namespace versatil::libtorch
