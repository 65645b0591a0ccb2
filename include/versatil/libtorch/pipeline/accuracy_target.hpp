// An accuracy target: a minimum output SQNR, a maximum top-1 drop, or both. Starting from the
// full quantization, the fewest layers are kept in float, taken in the order of the per-layer
// analysis (the layer whose quantization alone costs the most output SQNR first), until the
// target holds. Each step quantizes the model again with one more layer excluded, as
// `--target PATH=none` would; the report lists every step. A target that no step meets, even
// with every analysed layer but one in float, is an error: nothing is returned, so the CLI
// writes nothing.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/pipeline/quantize.hpp"

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
        const auto same = std::find_if(targets.begin(), targets.end(), [&](const runtime_target& t) { return t.path == layer; });
        if (same != targets.end()) same->backend = nullptr;
        else targets.push_back({layer, nullptr});
    }
    auto composed = runtime_quantizer::compose(std::move(targets));
    if (!composed) throw error(error_kind::invalid_argument, composed.error().message);
    return *composed;
}

}  // namespace detail

// quantize(), then layers kept in float one at a time until `target` holds. Without a target,
// quantize() itself.
inline quantization_result quantize_to_target(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                              const quantize_data& data, const accuracy_target& target,
                                              quantize_options options = {}) {
    if (target.empty()) return quantize(model, quantizer, data, options);
    if (quantizer.is_qat())
        throw error(error_kind::invalid_argument,
                    "an accuracy target ranks layers by the per-layer analysis, which QAT runs do not have: "
                    "keep layers in float with PATH=none targets instead");
    if (target.max_accuracy_drop && (!data.evaluation_labels || data.evaluation.empty()))
        throw error(error_kind::no_evaluation_data,
                    "a maximum top-1 drop is measured on labelled held-out data: give evaluation batches and their "
                    "labels (the data file's 'test' and 'test_labels')");
    options.per_layer = true;
    quantization_result result = quantize(model, quantizer, data, options);
    const std::vector<layer_sqnr> ranking = result.report.per_layer;
    const std::int64_t ranked_samples = result.report.per_layer_samples;
    std::vector<accuracy_target_step> steps{
        {{}, result.report.sqnr_db, result.report.quantized_accuracy, detail::meets(result.report, target)}};

    // The steps after the first need no analysis of their own: the ranking is the full
    // quantization's, which the final report keeps.
    quantize_options step_options = options;
    step_options.per_layer = false;
    std::vector<std::string> kept;
    for (std::size_t i = 0; !steps.back().met && i + 1 < ranking.size(); ++i) {
        kept.push_back(ranking[i].name);
        quantization_result step = quantize(model, detail::keeping_in_float(quantizer, kept), data, step_options);
        steps.push_back({kept, step.report.sqnr_db, step.report.quantized_accuracy, detail::meets(step.report, target)});
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
