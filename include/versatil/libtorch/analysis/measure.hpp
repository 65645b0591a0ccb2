// quantize() and measure(): the one stage sequence (stages/sequence.hpp), then the report that
// measures the lowered model against the float model: outputs, op counts, size, latency, top-1
// with labels, and the per-layer analysis (sensitivity.hpp, dynamic_switches.hpp). One report
// builder fills every figure from what the sequence left.
#pragma once

#include <torch/script.h>

#include <map>

#include "versatil/libtorch/analysis/float_layers.hpp"
#include "versatil/libtorch/analysis/float_prefix.hpp"
#include "versatil/libtorch/analysis/layer_switches.hpp"
#include "versatil/libtorch/analysis/report.hpp"
#include "versatil/libtorch/analysis/sensitivity.hpp"
#include "versatil/libtorch/plan/target_shown.hpp"
#include "versatil/libtorch/stages/sequence.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"
#include "versatil/libtorch/torchscript/progress.hpp"

namespace versatil::libtorch {

struct quantization_result {
    lowered_model model;
    quantization_report report;
};

namespace detail {

// Output SQNR against `reference` with `layer` alone quantized: prepared, calibrated on
// `calibration` (dynamic targets take none), converted and lowered on its own, then one pass
// over `evaluation`.
inline double sqnr_quantized_alone(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                   const std::string& layer, const quantize_data& calibration,
                                   const model_outputs& reference, const std::vector<batch>& evaluation, int threads) {
    auto alone = runtime_quantizer::compose({{layer, quantizer.quantizer_for(layer)->backend}});
    if (!alone) throw error(error_kind::invalid_argument, alone.error().message);
    const lowered_model lowered = *run_sequence(model, plan_for(*alone), calibration,
                                                {.threads = threads, .per_layer = false, .progress = false}).lowered;
    const engine_scope engine(engine_settings{lowered.plan.engine, threads, std::nullopt});
    return compare_outputs(reference, run_batches(lowered.module, evaluation)).overall.sqnr_db;
}

// Whether layers of one target may be quantized together for the per-layer analysis and each be
// as quantized alone: not with the steps that look beyond a layer (cle equalizes chains of
// layers, bias_correction measures each layer's output shift in the converted model, behind the
// other quantized layers, gptq and adaround round against the layers' inputs).
inline bool quantized_as_alone_together(const runtime_quantizer& quantizer, const std::string& a,
                                        const std::string& b) {
    const std::optional<backend_quantizer> target = quantizer.quantizer_for(a);
    const quantization_config& config = target->config();
    return target->module_path == quantizer.quantizer_for(b)->module_path && !config.cross_layer_equalization &&
           !config.bias_correction && !config.gptq && !config.adaround;
}

// The per-layer analysis (report.per_layer): output SQNR against the float `model` on
// `evaluation` with only each layer quantized, worst first. Static targets switch each layer's
// quantize ops on in `converted`, the model of the one calibration (sensitivity.hpp): one
// evaluation pass per layer; dynamic targets switch each layer's linear ops on in the direct
// path's model (dynamic_switches.hpp), one evaluation pass per layer too. Where that cannot
// stand for the layer quantized alone (a static layer's input on a grid observed elsewhere, as
// after average or max pooling; a dynamic model beyond the direct path, or with the cle
// option), the layer is quantized alone, calibrated on the first 8 calibration batches as the
// analysis always did: static layers in groups of layers apart (groups_apart), each group
// calibrated and converted once and its layers switched on in turn, or one lowering per layer
// where the group's converted model cannot stand for one either. A switched model's pass for a
// layer runs from the layer on, from the float model's values before it, computed once a batch
// for all its layers (float_prefix.hpp).
// Each layer is evaluated on the first samples of `evaluation` that `requested_samples` asks
// for (quantize_options::per_layer_samples); `reference_outputs`, when given, are the float
// model's on all of `evaluation` (measure() has them), used when every sample is. `progress`
// draws a bar on a terminal.
struct per_layer_analysis {
    std::vector<layer_sqnr> layers;  // worst first
    std::int64_t samples = 0;        // evaluated per layer
};

inline per_layer_analysis per_layer_sqnr(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                         const ::torch::jit::Module* converted, const std::vector<batch>& calibration,
                                         const std::vector<batch>& all_evaluation, int threads,
                                         std::int64_t requested_samples = automatic_per_layer_samples,
                                         const model_outputs* reference_outputs = nullptr, bool progress = false) {
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
        subset.calibration.assign(
            calibration.begin(),
            calibration.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(calibration.size(), 8)));
    if (!quantizer.is_dynamic() && !converted)
        throw error(error_kind::invalid_argument, "per_layer_sqnr: static targets need the converted model");
    std::optional<layer_switches> switches =
        layer_switches::make(model, plan_for(quantizer), converted, layers, calibration);
    progress_bar bar("per-layer analysis", static_cast<std::int64_t>(layers.size()), progress);
    std::map<std::string, double> figures;
    std::int64_t measured = 0;
    const auto measured_one = [&](const std::string& layer) { bar.update(++measured, layer); };
    const auto add = [&](const std::string& layer, double sqnr_db) {
        figures[layer] = sqnr_db;
        measured_one(layer);
    };
    // Output SQNR of a switched model with each of `rows`' switches on in turn, from its float
    // prefix run once a batch (float_prefix.hpp).
    const auto switched_rows = [&](const auto& switched, const std::vector<std::string>& rows) {
        std::vector<std::vector<std::string>> names;
        for (const std::string& layer : rows) names.push_back(switched.switch_names(layer));
        const std::vector<model_outputs> outputs =
            outputs_per_row(switched.module(), names, evaluation, [&](std::size_t row) { measured_one(rows[row]); });
        for (std::size_t row = 0; row < rows.size(); ++row)
            figures[rows[row]] = compare_outputs(reference, outputs[row]).overall.sqnr_db;
    };
    const auto alone = [&](const std::string& layer) {
        return sqnr_quantized_alone(model, quantizer, layer, subset, reference, evaluation, threads);
    };
    std::vector<std::string> on_borrowed_grids;  // static layers the converted model cannot stand for alone
    std::vector<std::string> switched;           // the others, when there are switches
    for (const std::string& layer : layers) {
        if (!switches)
            add(layer, alone(layer));
        else if (!switches->stands_for_alone(layer))
            on_borrowed_grids.push_back(layer);
        else
            switched.push_back(layer);
    }
    if (switches && !switched.empty()) {
        std::optional<engine_scope> pinned;
        if (switches->engine()) pinned.emplace(engine_settings{*switches->engine(), threads, std::nullopt});
        switched_rows(*switches, switched);
    }
    if (const switchable_quantization* switchable = switches ? switches->static_switches() : nullptr) {
        const auto may_join = [&](const std::string& a, const std::string& b) {
            return quantized_as_alone_together(quantizer, a, b);
        };
        for (const std::vector<std::string>& group : groups_apart(*switchable, on_borrowed_grids, may_join)) {
            std::vector<runtime_target> targets;
            for (const std::string& layer : group) targets.push_back({layer, quantizer.quantizer_for(layer)->backend});
            auto together = runtime_quantizer::compose(std::move(targets));
            if (!together) throw error(error_kind::invalid_argument, together.error().message);
            const stage_results done = run_sequence(model, plan_for(*together), subset,
                                                    {.threads = threads, .per_layer = false, .progress = false},
                                                    run_until::converted);
            switchable_quantization group_switches(done.converted->module, group, ::torch::jit::QuantType::STATIC);
            std::vector<std::string> rows;  // the layers the group's converted model stands for alone
            for (const std::string& layer : group) {
                const bool apart = std::ranges::none_of(group, [&](const std::string& other) {
                    return other != layer && group_switches.share_a_value(other, layer);
                });
                if (apart && group_switches.stands_for_alone(layer))
                    rows.push_back(layer);
                else
                    add(layer, alone(layer));
            }
            switched_rows(group_switches, rows);
        }
    }
    std::vector<layer_sqnr> result;  // in the model's order before sorting, whichever way each was measured
    for (const std::string& layer : layers) result.push_back({layer, figures.at(layer)});
    std::sort(result.begin(), result.end(),
              [](const layer_sqnr& a, const layer_sqnr& b) { return a.sqnr_db < b.sqnr_db; });
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

// The one report builder: every figure of the report of `lowered`, quantized from the float
// `model`, from what the stage sequence left (`done`: its conformed data, the converted model the
// per-layer analysis starts from, training, time).
inline quantization_report build_report(const ::torch::jit::Module& model, const lowered_model& lowered,
                                        const stage_results& done, const quantize_options& options) {
    const quantize_data& data = done.data;
    const runtime_quantizer& quantizer = lowered.plan.quantizer;
    quantization_report report;
    for (const target_info& target : quantizer.target_infos())
        report.targets.push_back({std::string(target.path), backend_shown(target),
                                  target.is_exclude() ? "" : std::string(target.backend->options),
                                  target.is_exclude() ? "" : calibration_shown(*target.backend)});
    report.engine = engine_name(lowered.plan.engine);
    // The targets that quantize nothing, what conforming the data changed, then the stages' changes.
    report.adjustments = targets_without_layers(model, quantizer);
    report.adjustments.insert(report.adjustments.end(), done.input_notes.begin(), done.input_notes.end());
    report.adjustments.insert(report.adjustments.end(), lowered.adjustments.begin(), lowered.adjustments.end());
    report.quantizable_kind = quantizer.is_dynamic() ? "linear/recurrent" : "conv/linear";
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
    const model_outputs quantized =
        on_lowered([&](const ::torch::jit::Module& copy) { return run_batches(copy, evaluation); });
    // Op counts: what one evaluation batch runs, on the float model as quantization sees it
    // (eval mode, inference branches) and on the lowered model.
    ::torch::jit::Module specialized = float_model.clone();
    if (!quantizer.is_qat()) specialize_for_inference(specialized);
    report.quantizable_ops =
        count_ops(executed_ops(specialized, evaluation.front()), counted_op_test(quantizer.is_dynamic()));
    report.quantized_ops =
        count_ops(on_lowered([&](const ::torch::jit::Module& copy) { return executed_ops(copy, evaluation.front()); }),
                  is_quantized_op);
    report.float_layers = float_layers(lowered, report.adjustments);
    if (mostly_float(report.quantized_ops, report.quantizable_ops))
        report.warnings.push_back("most of the model stays float: " + std::to_string(report.quantized_ops) + " of " +
                                  std::to_string(report.quantizable_ops) + " " + report.quantizable_kind +
                                  " op calls quantized (each float layer and why is listed in the report)");
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
    report.float_latency = spread_of(timed_runs_ms(float_model, timing));
    report.quantized_latency =
        on_lowered([&](const ::torch::jit::Module& copy) { return spread_of(timed_runs_ms(copy, timing)); });
    report.float_ms = report.float_latency.median_ms;
    report.quantized_ms = report.quantized_latency.median_ms;

    // Per-layer analysis: static targets quantize each layer alone in the converted model of the
    // one calibration (sensitivity.hpp); dynamic ones in the direct path's model, whose weights
    // are packed once (dynamic_switches.hpp). QAT has nothing to start from before training (it would
    // mean training once per layer), so it is left to post-training runs.
    if (options.per_layer && !quantizer.is_qat()) {
        per_layer_analysis analysis =
            per_layer_sqnr(float_model, quantizer, done.converted ? &done.converted->module : nullptr, data.calibration,
                           evaluation, options.threads, options.per_layer_samples, &reference, options.progress);
        report.per_layer = std::move(analysis.layers);
        report.per_layer_samples = analysis.samples;
    }
    report.quantize_seconds = done.seconds;
    if (!quantizer.is_qat()) {
        report.samples_per_rank = {samples_in(data.calibration)};  // distributed calibration: each rank's
    }
    if (done.training) {
        // The examples trained on, steps x batch; distributed QAT replaces it with each rank's slice.
        const std::int64_t batch_size = std::min(options.qat.training.batch_size, data.train_inputs->size(0));
        report.samples_per_rank = {batch_size * static_cast<std::int64_t>(done.training->training.losses.size())};
        report.qat_steps = static_cast<std::int64_t>(done.training->training.losses.size());
        report.qat_seconds = done.training->seconds;
        report.qat_final_loss = done.training->training.final_loss;
    }
    return report;
}

// quantize(), with what the sequence left: the accuracy target's greedy search switches the
// quantize ops of its converted model (sensitivity.hpp) instead of calibrating per candidate.
struct quantization_run {
    quantization_result result;
    stage_results stages;  // its lowered model moved into result.model
};

template <calibration_policy Policy>
quantization_run quantize_run(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                              const quantize_data& data, const quantize_options& options, Policy&& policy) {
    const std::lock_guard serialized(libtorch_state_mutex());
    const warning_capture warnings;
    stage_results done =
        run_sequence(model, plan_for(quantizer), data, options, run_until::lowered, accuracy_steps, policy);
    quantization_report report = build_report(model, *done.lowered, done, options);
    report.libtorch_warnings = warnings.folded();
    lowered_model lowered = std::move(*done.lowered);
    done.lowered.reset();
    return {{std::move(lowered), std::move(report)}, std::move(done)};
}

}  // namespace detail

// Quantizes and measures, calibrating (or training) as `policy` does: in this process unless
// given another (distributed/across_processes.hpp). Calls from several threads take turns
// (engine.hpp).
template <calibration_policy Policy = this_process>
quantization_result quantize(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                             const quantize_data& data, const quantize_options& options = {}, Policy&& policy = {}) {
    return detail::quantize_run(model, quantizer, data, options, policy).result;
}

template <calibration_policy Policy = this_process, class... Targets>
quantization_result quantize(const ::torch::jit::Module& model, Quantizer<Targets...> quantizer,
                             const quantize_data& data, const quantize_options& options = {}, Policy&& policy = {}) {
    return quantize(model, to_runtime(quantizer), data, options, policy);
}

// The report of any lowered model against the float `model` it came from, on `data`'s evaluation
// batches (its calibration batches when it has none). The per-layer analysis of static targets
// runs the sequence to the converted model once, on the calibration batches, in this process.
inline quantization_report measure(const ::torch::jit::Module& model, const lowered_model& lowered,
                                   const quantize_data& data, const quantize_options& options = {}) {
    const std::lock_guard serialized(detail::libtorch_state_mutex());
    const warning_capture warnings;
    const runtime_quantizer& quantizer = lowered.plan.quantizer;
    const quantize_options own{.threads = options.threads, .progress = false};
    const bool converts = options.per_layer && !quantizer.is_qat() && !quantizer.is_dynamic();
    detail::stage_results done = detail::run_sequence(
        model, lowered.plan, data, own, converts ? detail::run_until::converted : detail::run_until::conformed);
    done.seconds = 0.0;  // measure() quantizes nothing
    quantization_report report = detail::build_report(model, lowered, done, options);
    report.libtorch_warnings = warnings.folded();
    return report;
}

}  // namespace versatil::libtorch
