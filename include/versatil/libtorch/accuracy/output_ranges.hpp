// calibration=output: each activation's range chosen among the auto observer's candidates (the
// histogram search, min-max, the moving average, percentile, entropy) by the error it causes at
// the model's output rather than in the tensor: a range that clips a tail no later op passes on
// (a ReLU or a clamp cuts it anyway) costs nothing at the output and buys finer steps for the
// rest. Greedy, in the order the forward quantizes the activations, each scored with those before
// it at their chosen ranges and those after it at auto's choice. A candidate replaces the range
// chosen so far only where it is better on both halves of the scored outputs, by more than
// `output_range_options::margin_db`: a gain one half alone shows fits those samples, not the data,
// and the greedy search would otherwise pile up such fits, one per activation (held-out figures:
// docs/accuracy.md).
//
// Scored on a converted copy of the calibrated model, which computes what the engine will: one
// convert, then per activation one forward per distinct candidate on at most max_samples of the
// calibration samples, its quantize op's scale and zero point rewritten in place. Which attributes
// belong to which observer is read, not guessed: in the copy each observer returns a tag scale of
// its own (chosen_scale), which convert stores where that observer's qparams go. The choices are
// then written into the observers of the model itself (chosen_scale, chosen_zero_point), so that
// convert quantizes with exactly what was scored.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "versatil/libtorch/observers/histogram_ranges.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"

namespace versatil::libtorch {

struct output_range_options {
    // Calibration samples scored on (whole batches, at least one): each candidate is one forward.
    std::int64_t max_samples = 32;
    // How much better than the range chosen so far a candidate must be, on each half, to replace it.
    double margin_db = 0.01;
};

// The output SQNR one scoring forward gives, in dB: on all the scored samples and on each half.
struct scored_sqnr {
    double all = 0.0;
    double first_half = 0.0, second_half = 0.0;
};

// One candidate range of an activation, as convert stores qparams (scale as float32's value).
struct range_candidate {
    std::string methods;  // "percentile", or "histogram, percentile" where two give the same qparams
    double scale = 0.0;
    std::int64_t zero_point = 0;
    scored_sqnr output_sqnr_db;  // when scored
};

// What the search did to one activation.
struct output_range_choice {
    std::string observer_path;  // its observer in the calibrated model
    std::string module_path;    // the module whose forward quantizes it
    std::string value;        // the value's name in the converted graph ("out.16")
    std::vector<range_candidate> candidates;
    std::size_t automatic = 0;  // auto's choice: the lowest error in the tensor
    std::size_t chosen = 0;
};

struct output_range_summary {
    std::vector<output_range_choice> choices;  // in the order the forward quantizes them
    double auto_sqnr_db = 0.0;                 // the output with auto's choices everywhere
    double chosen_sqnr_db = 0.0;
    std::int64_t samples = 0;
    std::int64_t forwards = 0;
};

namespace detail {

inline constexpr std::string_view observer_class = "HistogramAutoObserver";

// Tag scales: 2^-100 * (i + 1), exact in float32 and far below any scale a calibration gives.
inline double tag_scale(std::size_t index) { return std::ldexp(static_cast<double>(index + 1), -100); }
inline std::optional<std::size_t> tag_index(double scale, std::size_t count) {
    const double index = std::ldexp(scale, 100) - 1.0;
    if (index < 0.0 || index != std::floor(index) || index >= static_cast<double>(count)) return std::nullopt;
    return static_cast<std::size_t>(index);
}

// The auto observer's candidates from its statistics, those giving the same qparams merged, and
// which of them auto itself picks (the lowest error in the tensor, the first on ties). None when
// there is nothing to search (unobserved, one value).
inline std::vector<range_candidate> candidates_of(const ::torch::jit::Module& observer, std::size_t& automatic) {
    const auto tensor = [&](const char* name) { return observer.attr(name).toTensor(); };
    const at::Tensor min_val = tensor("min_val"), max_val = tensor("max_val");
    if (observer_ops::nothing_to_search(min_val, max_val)) return {};
    const observer_ops::observed_values observed{tensor("samples"), tensor("sample_rate").item<std::int64_t>(),
                                                 tensor("lowest"), tensor("highest"),
                                                 tensor("seen_count").item<std::int64_t>()};
    const std::vector<observer_ops::candidate> found = observer_ops::auto_candidates(
        min_val, max_val, tensor("histogram"), tensor("seen_min"), tensor("seen_max"), tensor("moving_min"),
        tensor("moving_max"), tensor("entropy_histogram"), observed, observer.attr("dst_nbins").toInt(),
        observer.attr("quant_min").toInt(), observer.attr("quant_max").toInt(), observer.attr("symmetric").toBool(),
        observer.attr("unsigned_dtype").toBool(), observer.attr("eps").toDouble());
    const auto best = std::ranges::min_element(found, {}, &observer_ops::candidate::error);
    std::vector<range_candidate> distinct;
    for (const observer_ops::candidate& c : found) {
        const double scale = c.scale.item<double>();
        const std::int64_t zero_point = c.zero_point.item<std::int64_t>();
        auto same = std::ranges::find_if(distinct, [&](const range_candidate& d) {
            return d.scale == scale && d.zero_point == zero_point;
        });
        if (same == distinct.end())
            same = distinct.insert(distinct.end(), {c.method, scale, zero_point, {}});
        else
            same->methods += std::string(", ") + c.method;
        if (&c == &*best) automatic = static_cast<std::size_t>(same - distinct.begin());
    }
    return distinct;
}

// Rows [begin, end) of each output: a part of the scored samples (for outputs whose dim 0 is the
// batch; another dim 0 splits along itself, still two disjoint parts of the data).
inline model_outputs rows_of(const model_outputs& outputs, double begin, double end) {
    model_outputs part{outputs.names, {}};
    for (const at::Tensor& tensor : outputs.tensors) {
        const auto row = [&](double at) { return static_cast<std::int64_t>(at * static_cast<double>(tensor.size(0))); };
        part.tensors.push_back(tensor.slice(0, row(begin), row(end)));
    }
    return part;
}

// Whether `candidate` beats `current` on both halves by more than `margin_db`. With one sample
// there are no halves: each holds the whole's figure.
inline bool better_on_both_halves(const scored_sqnr& candidate, const scored_sqnr& current, double margin_db) {
    return candidate.first_half > current.first_half + margin_db &&
           candidate.second_half > current.second_half + margin_db;
}

// An activation under search: its observer in the calibrated model and, in the converted copy,
// the module and attributes its quantize op reads.
struct searched_activation {
    ::torch::jit::Module observer;
    output_range_choice choice;
    std::optional<::torch::jit::Module> owner;  // in the copy
    std::string scale_attribute, zero_point_attribute;

    void set(std::size_t candidate) {
        owner->setattr(scale_attribute, choice.candidates[candidate].scale);
        owner->setattr(zero_point_attribute, choice.candidates[candidate].zero_point);
    }
};

// The copy's quantize ops in forward order, each as (module path, scale attribute).
inline std::vector<std::pair<std::string, std::string>> quantized_in_order(const ::torch::jit::Module& converted) {
    const std::shared_ptr<::torch::jit::Graph> graph = converted.get_method("forward").graph();
    const std::map<const ::torch::jit::Value*, std::string> paths = module_value_paths(graph);
    std::vector<std::pair<std::string, std::string>> order;
    for (const ::torch::jit::Node* quantize : nodes_where(graph, [](const ::torch::jit::Node* node) {
             return node->kind() == c10::aten::quantize_per_tensor;
         })) {
        const ::torch::jit::Node* scale = quantize->input(1)->node();
        if (scale->kind() != c10::prim::GetAttr) continue;
        const auto path = paths.find(scale->input());
        if (path != paths.end()) order.emplace_back(path->second, scale->s(c10::attr::name));
    }
    return order;
}

}  // namespace detail

// Chooses, in `calibrated`, the range of every auto-observed activation whose module `in_scope`
// selects, by the output SQNR against `reference` (prepare's float model) on the leading
// `options.max_samples` of `calibration`; writes each choice into its observer. `convert` is the
// sequence's convert stage (prepared_model&& -> converted_model), handed in: an accuracy step runs
// inside the stage sequence, which includes the steps, so a step cannot include the stages.
template <class InScope, class Convert>
output_range_summary choose_output_ranges(prepared_model& calibrated, const ::torch::jit::Module& reference,
                                          const std::vector<batch>& calibration, InScope&& in_scope,
                                          Convert&& convert, const output_range_options& options = {}) {
    using namespace detail;
    output_range_summary summary;
    std::vector<searched_activation> activations;
    for (const auto& item : calibrated.module.named_modules()) {
        if (!detail::class_name_contains(item.value, observer_class)) continue;
        const std::size_t last_dot = item.name.rfind('.');
        const std::string owner_path = last_dot == std::string::npos ? "" : item.name.substr(0, last_dot);
        if (!in_scope(owner_path)) continue;
        searched_activation activation{item.value, {item.name, owner_path, "", {}, 0, 0}, std::nullopt, "", ""};
        activation.choice.candidates = candidates_of(item.value, activation.choice.automatic);
        activation.choice.chosen = activation.choice.automatic;
        if (activation.choice.candidates.size() > 1) activations.push_back(std::move(activation));
    }
    const std::vector<batch> batches = leading_batches(calibration, options.max_samples);
    summary.samples = samples_in(batches);
    if (activations.empty() || batches.empty()) return summary;

    // The copy, each observer tagged, converted: the attributes holding a tag are that observer's.
    prepared_model tagged{calibrated.module.clone(), calibrated.plan, {}, std::nullopt};
    for (std::size_t i = 0; i < activations.size(); ++i) {
        ::torch::jit::Module observer = find_submodule(tagged.module, activations[i].choice.observer_path);
        observer.setattr("chosen_scale", tag_scale(i));
        observer.setattr("chosen_zero_point", std::int64_t{0});
    }
    converted_model copy = convert(std::move(tagged));
    for (const auto& item : copy.module.named_modules()) {
        for (const auto& attribute : item.value.named_attributes(/*recurse=*/false)) {
            const std::size_t at = attribute.name.rfind("_scale_");
            if (at == std::string::npos || !attribute.value.isDouble()) continue;
            const std::optional<std::size_t> index = tag_index(attribute.value.toDouble(), activations.size());
            if (!index) continue;
            searched_activation& activation = activations[*index];
            activation.owner = item.value;
            activation.choice.module_path = item.name;
            activation.choice.value = attribute.name.substr(0, at);
            activation.scale_attribute = attribute.name;
            activation.zero_point_attribute = activation.choice.value + "_zero_point_" +
                                              attribute.name.substr(at + std::string_view("_scale_").size());
        }
    }
    // Topological order: that of the quantize ops in the forward (inlined by prepare). An
    // observer none of them reads has nothing to choose: convert left its value float (an output
    // the model returns), or quantizes it in a method the forward calls, which is not searched.
    const std::vector<std::pair<std::string, std::string>> order = quantized_in_order(copy.module);
    const auto position = [&](const searched_activation& activation) {
        const auto at = std::ranges::find(order, std::pair{activation.choice.module_path, activation.scale_attribute});
        return static_cast<std::size_t>(at - order.begin());
    };
    std::erase_if(activations, [&](const searched_activation& a) { return !a.owner || position(a) == order.size(); });
    std::ranges::stable_sort(activations, {}, position);
    for (searched_activation& activation : activations) activation.set(activation.choice.automatic);

    const model_outputs expected = run_batches(reference, batches);
    const bool halves = summary.samples > 1;
    const model_outputs expected_first = rows_of(expected, 0.0, 0.5), expected_second = rows_of(expected, 0.5, 1.0);
    // The copy's output with the ranges set now, scored on all samples and on each half.
    const auto score = [&] {
        ++summary.forwards;
        const model_outputs actual = run_batches(copy.module, batches);
        scored_sqnr scored;
        scored.all = compare_outputs(expected, actual).overall.sqnr_db;
        const auto on_half = [&](const model_outputs& expected_half, double begin, double end) {
            return halves ? compare_outputs(expected_half, rows_of(actual, begin, end)).overall.sqnr_db : scored.all;
        };
        scored.first_half = on_half(expected_first, 0.0, 0.5);
        scored.second_half = on_half(expected_second, 0.5, 1.0);
        return scored;
    };
    scored_sqnr current = score();
    summary.auto_sqnr_db = current.all;
    for (searched_activation& activation : activations) {
        output_range_choice& choice = activation.choice;
        choice.candidates[choice.automatic].output_sqnr_db = current;
        for (std::size_t c = 0; c < choice.candidates.size(); ++c) {
            if (c == choice.automatic) continue;
            activation.set(c);
            choice.candidates[c].output_sqnr_db = score();
            if (better_on_both_halves(choice.candidates[c].output_sqnr_db,
                                      choice.candidates[choice.chosen].output_sqnr_db, options.margin_db))
                choice.chosen = c;
        }
        activation.set(choice.chosen);
        current = choice.candidates[choice.chosen].output_sqnr_db;
    }
    summary.chosen_sqnr_db = current.all;
    for (searched_activation& activation : activations) {
        const range_candidate& chosen = activation.choice.candidates[activation.choice.chosen];
        activation.observer.setattr("chosen_scale", chosen.scale);
        activation.observer.setattr("chosen_zero_point", chosen.zero_point);
        summary.choices.push_back(std::move(activation.choice));
    }
    return summary;
}

// The sequence's step for calibration=output (accuracy/steps.hpp): once calibrated, before
// convert; every choice noted in the report, with the output SQNR of each candidate.
struct output_ranges_step {
    static bool applies(const target_plan& target) { return target.chooses_output_ranges; }
    template <class Convert>
    static void run(prepared_model& calibrated, const std::vector<batch>& calibration, Convert&& convert) {
        const quantization_plan& plan = calibrated.plan;
        if (!calibrated.folded_model) return;
        const auto in_scope = [&](const std::string& path) {
            return plan.target_with(path, &target_plan::chooses_output_ranges).has_value();
        };
        const output_range_summary summary =
            choose_output_ranges(calibrated, *calibrated.folded_model, calibration, in_scope, convert);
        std::size_t changed = 0;
        for (const output_range_choice& choice : summary.choices) {
            changed += choice.chosen != choice.automatic ? 1 : 0;
            std::string scored;
            for (std::size_t c = 0; c < choice.candidates.size(); ++c)
                scored += (c ? ", " : "") + choice.candidates[c].methods + " " +
                          sqnr_text(choice.candidates[c].output_sqnr_db.all) +
                          (c == choice.automatic ? " (auto's)" : "");
            const std::string& chosen = choice.candidates[choice.chosen].methods;
            calibrated.adjustments.push_back({choice.module_path, "calibration=output: " + choice.value +
                                                                      " quantized with " + chosen +
                                                                      "'s range (output SQNR: " + scored + ")"});
        }
        calibrated.adjustments.push_back(
            {"", "calibration=output: " + std::to_string(summary.choices.size()) + " activation range(s) chosen on " +
                     std::to_string(summary.samples) + " calibration samples, " + std::to_string(changed) +
                     " other than auto's (each better on both halves of them); output SQNR there " +
                     sqnr_text(summary.auto_sqnr_db) + " with auto's, " +
                     sqnr_text(summary.chosen_sqnr_db) + " chosen (" + std::to_string(summary.forwards) +
                     " forwards)"});
    }
};

}  // namespace versatil::libtorch
