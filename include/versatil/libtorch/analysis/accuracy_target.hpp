// An accuracy target: a minimum output SQNR, a maximum top-1 drop, or both. Starting from the
// full quantization, layers are kept in float one at a time, greedily, until the target holds:
// each step keeps the layer that, kept in float with those already kept, brings the model
// closest to the target (the SQNR, or top-1 for a top-1 target). Candidates are rated on the full
// quantization's converted model with its quantize ops switched by layer (sensitivity.hpp: the
// one calibration, no quantization per candidate), except where that model cannot stand for the
// quantized one: a kept layer whose output is read by a quantized layer through max pooling or
// flatten is observed at that layer's input once kept, on a grid of its own, so such a candidate
// is quantized for real. Each step is then quantized for real (reusing the candidate's own
// quantization when it was rated that way), with one more layer excluded as `--target PATH=none`
// would: every figure of the report is the lowered model's; the switched model only chooses.
//
// Cost, for L analysed layers and S steps: the full quantization with its per-layer analysis;
// then per step one evaluation pass of the converted model per remaining candidate (fewer than
// S x L passes in all) plus one quantization per candidate rated for real, and one quantization
// for the step unless its layer was rated for real. A layer's cost quantized alone (the per-layer
// ranking, followed before) is not its gain once others are float: on the trained Fashion-MNIST
// CNN at 46.25 dB that ranking kept 3 layers where the greedy search keeps 2.
//
// Dynamic targets rate candidates the same way on the direct path's model with every targeted
// linear op behind a switch (dynamic_switches.hpp), which stands for every choice of layers
// kept. Where the direct path does not cover the model (or a target has the cle option), they
// keep layers in the per-layer analysis's order (the layer whose quantization alone costs the
// most output SQNR first). A target that no step meets, even with every analysed layer but one
// in float, is an error: nothing is returned, so the CLI writes nothing.
#pragma once

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/analysis/measure.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"
#include "versatil/libtorch/analysis/layer_switches.hpp"

namespace versatil::libtorch {

struct accuracy_target {
    std::optional<double> min_sqnr_db{};        // output SQNR against the float model, dB
    std::optional<double> max_accuracy_drop{};  // top-1 points (percent) below the float model's; needs labels

    [[nodiscard]] bool empty() const { return !min_sqnr_db && !max_accuracy_drop; }
};

inline std::string describe(const accuracy_target& target) {
    char text[128] = "";
    if (target.min_sqnr_db && target.max_accuracy_drop)
        std::snprintf(text, sizeof text, "SQNR >= %.2f dB and top-1 drop <= %.2f points", *target.min_sqnr_db,
                      *target.max_accuracy_drop);
    else if (target.min_sqnr_db)
        std::snprintf(text, sizeof text, "SQNR >= %.2f dB", *target.min_sqnr_db);
    else if (target.max_accuracy_drop)
        std::snprintf(text, sizeof text, "top-1 drop <= %.2f points", *target.max_accuracy_drop);
    return text;
}

namespace detail {

inline bool meets(const quantization_report& report, const accuracy_target& target) {
    if (target.min_sqnr_db && !(report.sqnr_db >= *target.min_sqnr_db)) return false;
    if (target.max_accuracy_drop &&
        !(100.0 * (*report.float_accuracy - *report.quantized_accuracy) <= *target.max_accuracy_drop))
        return false;
    return true;
}

// `quantizer` with `layers` kept in float: a target of exactly that path becomes an exclusion,
// any other layer gets one of its own inside the target that covers it.
inline runtime_quantizer keeping_in_float(const runtime_quantizer& quantizer, const std::vector<std::string>& layers) {
    std::vector<runtime_target> targets = quantizer.targets();
    for (const std::string& layer : layers) {
        const auto same =
            std::find_if(targets.begin(), targets.end(), [&](const runtime_target& t) { return t.path == layer; });
        if (same != targets.end()) same->backend = nullptr;
        else targets.push_back({layer, nullptr});
    }
    auto composed = runtime_quantizer::compose(std::move(targets));
    if (!composed) throw error(error_kind::invalid_argument, composed.error().message);
    return *composed;
}

// How far a model is from `target`: the smallest margin over its conditions, in dB above the
// minimum SQNR and in points below the maximum top-1 drop; negative when one fails.
inline double margin(const accuracy_target& target, double sqnr_db, std::optional<double> float_accuracy,
                     std::optional<double> quantized_accuracy) {
    double smallest = std::numeric_limits<double>::infinity();
    if (target.min_sqnr_db) smallest = std::min(smallest, sqnr_db - *target.min_sqnr_db);
    if (target.max_accuracy_drop && float_accuracy && quantized_accuracy)
        smallest = std::min(smallest, *target.max_accuracy_drop - 100.0 * (*float_accuracy - *quantized_accuracy));
    return smallest;
}

// A step's layer, with its quantization when the rating quantized for it.
struct greedy_choice {
    std::string layer;
    std::optional<quantization_result> quantized;  // when it was rated by quantizing
};

// The greedy search's rating of candidates: the float model's outputs, and a model whose
// quantization switches by layer to keep layers in float in: the full quantization's converted
// model for static targets, the direct path's model for dynamic ones (layer_switches.hpp).
struct greedy_rating {
    layer_switches switchable;
    std::vector<batch> evaluation;
    model_outputs reference;
    std::optional<at::Tensor> labels;  // held-out labels, for a top-1 target
    std::optional<double> float_accuracy;
    engine_settings engine;

    using choice = greedy_choice;

    // Of `candidates`, the one that, kept in float with `kept`, leaves the model closest to
    // `target` (the larger SQNR between equal margins, the earlier candidate between equal
    // SQNRs). One evaluation pass of the switched model each; where the switched model cannot
    // stand for the quantized one (stands_for_keeping), `quantize_keeping` quantizes for real,
    // and a candidate whose quantization the engine cannot run is none. No layer when none is.
    template <class QuantizeKeeping>
    choice best(const std::vector<std::string>& kept, const std::vector<std::string>& candidates,
                const accuracy_target& target, const QuantizeKeeping& quantize_keeping) {
        choice chosen;
        double best_margin = -std::numeric_limits<double>::infinity(), best_sqnr = best_margin;
        for (const std::string& candidate : candidates) {
            std::vector<std::string> trial = kept;
            trial.push_back(candidate);
            double sqnr = 0.0;
            std::optional<double> accuracy;
            std::optional<quantization_result> quantized;
            if (switchable.stands_for_keeping(trial)) {
                const std::lock_guard serialized(libtorch_state_mutex());
                const engine_scope scope(engine);
                switchable.keep_in_float(trial);
                const model_outputs outputs = run_batches(switchable.module(), evaluation);
                sqnr = compare_outputs(reference, outputs).overall.sqnr_db;
                if (target.max_accuracy_drop && labels) accuracy = top1_accuracy(outputs, *labels);
            } else {
                try {
                    quantized = quantize_keeping(trial);
                } catch (const error& failure) {
                    // The engine cannot run the model with this layer kept (QNNPACK, given a
                    // dynamic q_proj kept beside quantized k_proj and v_proj), at lowering's
                    // check or when measuring: no candidate.
                    if (failure.kind() != error_kind::lowering_failed) throw;
                    continue;
                }
                sqnr = quantized->report.sqnr_db;
                accuracy = quantized->report.quantized_accuracy;
            }
            const double how_close = margin(target, sqnr, float_accuracy, accuracy);
            if (chosen.layer.empty() || how_close > best_margin || (how_close == best_margin && sqnr > best_sqnr)) {
                chosen = {candidate, std::move(quantized)};
                best_margin = how_close;
                best_sqnr = sqnr;
            }
        }
        return chosen;
    }
};

}  // namespace detail

// quantize(), then layers kept in float one at a time until `target` holds. Without a target,
// quantize() itself. Every quantization calibrates (or trains) as `policy` does.
template <calibration_policy Policy = this_process>
quantization_result quantize_to_target(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                       const quantize_data& data, const accuracy_target& target,
                                       quantize_options options = {}, Policy&& policy = {}) {
    if (target.empty()) return quantize(model, quantizer, data, options, policy);
    if (quantizer.is_qat())
        throw error(error_kind::invalid_argument,
                    "an accuracy target ranks layers by the per-layer analysis, which QAT runs do not have: "
                    "keep layers in float with PATH=none targets instead");
    if (target.max_accuracy_drop && (!data.evaluation_labels || data.evaluation.empty()))
        throw error(error_kind::no_evaluation_data,
                    "a maximum top-1 drop is measured on labelled held-out data: give evaluation batches and their "
                    "labels (the data file's 'test' and 'test_labels')");
    options.per_layer = true;
    detail::quantization_run full = detail::quantize_run(model, quantizer, data, options, policy);
    quantization_result result = std::move(full.result);
    const std::vector<layer_sqnr> ranking = result.report.per_layer;
    const std::int64_t ranked_samples = result.report.per_layer_samples;
    std::vector<accuracy_target_step> steps{
        {{}, result.report.sqnr_db, result.report.quantized_accuracy, detail::meets(result.report, target)}};
    std::vector<std::string> candidates;
    for (const layer_sqnr& layer : ranking) candidates.push_back(layer.name);

    // The greedy search's rating, on the data the report measures on: static targets switch the
    // converted model, dynamic ones the direct path's.
    std::optional<detail::greedy_rating> rating;
    if (!steps.back().met) {
        const std::lock_guard serialized(detail::libtorch_state_mutex());
        std::optional<layer_switches> switches = layer_switches::make(
            model, result.model.plan, full.stages.converted ? &full.stages.converted->module : nullptr, candidates,
            full.stages.data.calibration);
        if (switches) {
            // The data as the sequence conformed it, which the report measured on.
            const bool held_out = !full.stages.data.evaluation.empty();
            std::vector<batch> evaluation = held_out ? full.stages.data.evaluation : full.stages.data.calibration;
            ::torch::jit::Module float_model = private_clone(model);
            float_model.eval();
            const engine_settings engine{result.model.plan.engine, options.threads, std::nullopt};
            const engine_scope scope(engine);
            model_outputs reference = run_batches(float_model, evaluation);
            std::optional<at::Tensor> labels = held_out ? data.evaluation_labels : std::nullopt;
            rating.emplace(detail::greedy_rating{std::move(*switches), std::move(evaluation), std::move(reference),
                                                 std::move(labels), result.report.float_accuracy, engine});
        }
    }
    full.stages.converted.reset();

    // The steps after the first need no analysis of their own: the ranking is the full
    // quantization's, which the final report keeps.
    quantize_options step_options = options;
    step_options.per_layer = false;
    std::vector<std::string> kept;
    const auto quantize_keeping = [&](const std::vector<std::string>& layers) {
        return quantize(model, detail::keeping_in_float(quantizer, layers), data, step_options, policy);
    };
    while (!steps.back().met && kept.size() + 1 < ranking.size()) {
        detail::greedy_choice next = rating ? rating->best(kept, candidates, target, quantize_keeping)
                                            : detail::greedy_choice{candidates.front(), std::nullopt};
        if (next.layer.empty()) break;  // no candidate left that the engine can run
        kept.push_back(next.layer);
        candidates.erase(std::find(candidates.begin(), candidates.end(), next.layer));
        quantization_result step = next.quantized ? std::move(*next.quantized) : quantize_keeping(kept);
        steps.push_back(
            {kept, step.report.sqnr_db, step.report.quantized_accuracy, detail::meets(step.report, target)});
        result = std::move(step);
    }
    if (!steps.back().met) {
        char best[96];
        const auto highest = std::max_element(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
            return a.sqnr_db < b.sqnr_db;
        });
        std::snprintf(best, sizeof best, "; the best step reached %.2f dB with %zu in float", highest->sqnr_db,
                      highest->kept_in_float.size());
        throw error(error_kind::accuracy_target_unmet,
                    describe(target) + " is not met even with " + std::to_string(kept.size()) + " of the " +
                        std::to_string(ranking.size()) + " analysed layers kept in float" + best);
    }
    result.report.per_layer = ranking;
    result.report.per_layer_samples = ranked_samples;
    result.report.accuracy_target = describe(target);
    result.report.target_steps = std::move(steps);
    return result;
}

}  // namespace versatil::libtorch
