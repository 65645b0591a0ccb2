// Observers of values that only clamps read observe them clamped.
//
// LibTorch 1.13's graph mode observes a convolution's output before the ReLU6 (hardtanh) that
// reads it: the clamp reuses its input's qparams, so a conv output spanning [-9, 11] is
// quantized on that whole range, though ReLU6 keeps [0, 6] of it, three times the step it
// needs. X86InductorQuantizer, whose scheme the x86_inductor backend follows, annotates
// conv + ReLU6 / hardtanh / hardswish as one pattern and observes only after the activation.
// LibTorch has no such fused kernel, but the range can follow the consumer: where every reader
// of an observed value is a function that is constant outside an interval (ReLU, ReLU6,
// hardtanh and clamp with constant bounds, hardswish below -3, hardsigmoid outside [-3, 3]),
// the observer sees the value clamped to the hull of those intervals during calibration. Every
// calibration method then chooses its range from what the readers can tell apart; quantizing
// the value on that range saturates where the reader is constant anyway, so the quantized
// model computes the same function on a finer grid. The clamps are tagged and taken out again
// before convert (restore_observed_values): InsertQuantDeQuant must find the producer's own
// output under the observer, so that lower() still fuses the producer into a quantized op.
// QAT's fake-quantize modules are not touched: they quantize what they observe.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>

#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

namespace detail {

// The interval [low, high] outside which a function of one value is constant.
struct constant_outside {
    double low = -std::numeric_limits<double>::infinity();
    double high = std::numeric_limits<double>::infinity();
    bool operator==(const constant_outside&) const = default;
};

inline const c10::Symbol clamped_for_observer = c10::Symbol::attr("versatil_clamped_for_observer");

// A bound of a clamp: a constant number, or None (no bound on that side).
inline std::optional<double> constant_bound(::torch::jit::Value* value, double none) {
    const std::optional<c10::IValue> constant = ::torch::jit::toIValue(value);
    if (!constant) return std::nullopt;
    if (constant->isNone()) return none;
    if (constant->isDouble()) return constant->toDouble();
    if (constant->isInt()) return static_cast<double>(constant->toInt());
    return std::nullopt;
}

// Where `reader` reads `value` as the input of a function constant outside an interval: that
// interval. Nothing for every other use (a second operand, a graph output, a matmul...).
// `bound_source`, if given, maps a bound of hardtanh or clamp to the value holding its constant.
inline std::optional<constant_outside> interval_of_reader(
    const ::torch::jit::Node* reader, const ::torch::jit::Value* value,
    ::torch::jit::Value* (*bound_source)(::torch::jit::Value*) = nullptr) {
    if (reader->inputs().empty() || reader->input(0) != value) return std::nullopt;
    const std::string_view kind = reader->kind().toQualString();
    // The op or its in-place form (relu_), which reads the same way.
    const auto is = [&](std::string_view name) {
        return kind.starts_with(name) && (kind.size() == name.size() || kind.substr(name.size()) == "_");
    };
    constexpr double infinity = std::numeric_limits<double>::infinity();
    if (is("aten::relu")) return constant_outside{0.0, infinity};
    if (is("aten::relu6")) return constant_outside{0.0, 6.0};
    if (is("aten::hardswish")) return constant_outside{-3.0, infinity};
    if (is("aten::hardsigmoid")) return constant_outside{-3.0, 3.0};
    if ((is("aten::hardtanh") || is("aten::clamp")) && reader->inputs().size() == 3) {
        const auto bound = [&](std::size_t input) {
            return bound_source ? bound_source(reader->input(input)) : reader->input(input);
        };
        const std::optional<double> low = constant_bound(bound(1), -infinity);
        const std::optional<double> high = constant_bound(bound(2), infinity);
        if (low && high && *low <= *high) return constant_outside{*low, *high};
    }
    return std::nullopt;
}

// Whether `node` is a clamp: ReLU, ReLU6, hardtanh or clamp, not hardswish and hardsigmoid,
// which are constant outside an interval but compute more inside it.
inline bool is_clamp(const ::torch::jit::Node* node) {
    const std::string_view kind = node->kind().toQualString();
    return kind.starts_with("aten::relu") || kind.starts_with("aten::hardtanh") || kind.starts_with("aten::clamp");
}

// The hull of the intervals of every reader of `value`, if each has one (`bound_source` as for
// interval_of_reader).
inline std::optional<constant_outside> interval_of_readers(
    const ::torch::jit::Value* value, ::torch::jit::Value* (*bound_source)(::torch::jit::Value*) = nullptr) {
    if (value->uses().empty()) return std::nullopt;
    constant_outside hull{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
    for (const ::torch::jit::Use& use : value->uses()) {
        const std::optional<constant_outside> interval = interval_of_reader(use.user, value, bound_source);
        if (!interval) return std::nullopt;
        hull.low = std::min(hull.low, interval->low);
        hull.high = std::max(hull.high, interval->high);
    }
    return hull;
}

// Whether `node` is the call of a post-training observer's forward (observers.hpp names their
// classes), dynamic quantization's placeholder excepted: it observes nothing.
inline bool is_observer_call(const ::torch::jit::Node* node) {
    if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward") return false;
    const auto type = node->input(0)->type()->cast<c10::ClassType>();
    if (!type || !type->name()) return false;
    const std::string name = type->name()->qualifiedName();
    return name.starts_with("__torch__.versatil.observers.") && name.find("DynamicQuantization") == std::string::npos;
}

}  // namespace detail

// How many observers of `module` read a clamped value: the tagged clamps of each module's
// graphs, once per module (modules of one class share their graphs, not their observers).
inline int clamped_observations(const ::torch::jit::Module& module) {
    int count = 0;
    for (const ::torch::jit::Module& instance : module.modules())
        for (const ::torch::jit::Method& method : instance.get_methods())
            count += static_cast<int>(nodes_where(method.graph(), [](const ::torch::jit::Node* node) {
                                          return node->hasAttribute(detail::clamped_for_observer);
                                      }).size());
    return count;
}

// Gives each observer of `prepared` whose value only clamp-like functions read the value
// clamped to where they vary. Returns how many observers now see a clamped value.
inline int clamp_observed_values(const ::torch::jit::Module& prepared) {
    for (const std::shared_ptr<::torch::jit::Graph>& graph : all_method_graphs(prepared)) {
        for (::torch::jit::Node* call : nodes_where(graph, detail::is_observer_call)) {
            // InsertObservers hands the observer's output to every reader of the value.
            const std::optional<detail::constant_outside> interval = detail::interval_of_readers(call->output());
            if (!interval || (std::isinf(interval->low) && std::isinf(interval->high))) continue;
            const ::torch::jit::WithInsertPoint before(call);
            const auto bound = [&](double value) {
                return std::isfinite(value) ? graph->insertConstant(value) : graph->insertConstant(c10::IValue());
            };
            ::torch::jit::Value* low = bound(interval->low);
            ::torch::jit::Value* high = bound(interval->high);
            ::torch::jit::Node* clamp = graph->insertNode(graph->create(c10::aten::clamp, {call->input(1), low, high}));
            clamp->output()->setType(call->input(1)->type());
            clamp->i_(detail::clamped_for_observer, 1);
            call->replaceInput(1, clamp->output());
        }
    }
    return clamped_observations(prepared);
}

// Takes the clamps clamp_observed_values inserted out of `prepared` again: each observer reads
// the value itself, as InsertQuantDeQuant expects.
inline void restore_observed_values(const ::torch::jit::Module& prepared) {
    for (const std::shared_ptr<::torch::jit::Graph>& graph : all_method_graphs(prepared)) {
        for (::torch::jit::Node* clamp : nodes_where(graph, [](const ::torch::jit::Node* node) {
                 return node->kind() == c10::aten::clamp && node->hasAttribute(detail::clamped_for_observer);
             })) {
            clamp->output()->replaceAllUsesWith(clamp->input(0));
            ::torch::jit::Node* low = clamp->input(1)->node();
            ::torch::jit::Node* high = clamp->input(2)->node();
            clamp->destroy();
            for (::torch::jit::Node* bound : {low, high})
                if (bound->outputs().at(0)->uses().empty()) bound->destroy();
        }
    }
}

}  // namespace versatil::libtorch
