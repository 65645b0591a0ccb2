// Each dynamic linear layer's weight scheme (per channel or per tensor) and reduce_range, chosen
// by measurement with the engine that will run it: the layer's output on the calibration data,
// computed by LibTorch's own quantized::linear_dynamic for every candidate, against the float
// layer. Which candidate wins is not a property of the weights alone: the engine quantizes the
// input at run time (seven bits under reduce_range on oneDNN, eight on QNNPACK whatever is asked),
// and the layer's error is that of the product. Why, and what was measured: docs/weight-choice.md.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "versatil/libtorch/observers/observers.hpp"
#include "versatil/libtorch/observers/quantized_weight.hpp"
#include "versatil/libtorch/torchscript/call_operator.hpp"
#include "versatil/libtorch/plan/plan.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/torchscript/graph_on_module.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

// How one dynamic linear layer is quantized: its weights' spec, and the reduce_range argument
// its quantized::linear_dynamic receives.
struct dynamic_weight_choice {
    quantization_spec weight;
    bool reduce_range = true;
};

namespace detail {

// The layer's weights quantized under `choice` and packed for the engine in effect.
inline c10::IValue packed_weights(const at::Tensor& weight, const at::Tensor& bias,
                                  const dynamic_weight_choice& choice) {
    return call_operator("quantized::linear_prepack",
                         {quantized_weight(weight, choice.weight), bias.defined() ? c10::IValue(bias) : c10::IValue()})
        .front();
}

// The layer's output as the engine in effect computes it under `choice`, from its packed weights.
inline at::Tensor linear_dynamic_output(const at::Tensor& input, const c10::IValue& packed,
                                        const dynamic_weight_choice& choice) {
    return call_operator("quantized::linear_dynamic", {input, packed, choice.reduce_range}).front().toTensor();
}

inline std::string choice_text(const dynamic_weight_choice& choice) {
    return std::string(is_per_channel(choice.weight.qscheme) ? "per-channel" : "per-tensor") +
           " weights, reduce_range " + (choice.reduce_range ? "on" : "off");
}

}  // namespace detail

// The calibration samples each choice is measured on: the leading batches up to this many
// samples (whole batches, at least one). One float pass over them records every layer's input;
// the choice then costs a few calls of the layer per candidate. 32 samples (one batch of the CLI)
// flipped 4 of the zoo's 60 near-tie choices against all 64 (docs/weight-choice.md), so 64.
inline constexpr std::int64_t dynamic_choice_samples = 64;

// The candidates for a layer whose backend gives `standard`: its weights per tensor too when
// they are per channel (a backend's per-tensor option is the user's choice and stays), and
// reduce_range off too unless the backend's activation range asks for it (its reduce_range
// option). `standard` comes first: it keeps its place on a tie, as QNNPACK, which ignores
// reduce_range, makes one.
inline std::vector<dynamic_weight_choice> dynamic_weight_candidates(const dynamic_weight_choice& standard,
                                                                    bool reduce_range_asked) {
    std::vector<dynamic_weight_choice> candidates{standard};
    if (is_per_channel(standard.weight.qscheme))
        candidates.push_back({detail::per_tensor_weights(standard.weight), standard.reduce_range});
    if (standard.reduce_range && !reduce_range_asked) {
        const std::size_t schemes = candidates.size();
        for (std::size_t i = 0; i < schemes; ++i) candidates.push_back({candidates[i].weight, false});
    }
    return candidates;
}

// The candidate with the least squared error at the layer's output over `inputs` (what the layer
// read on `samples` calibration samples), with the engine in effect (an engine_scope); the first
// on a tie. `reason` says what each candidate gave.
struct measured_weight_choice {
    dynamic_weight_choice choice;
    std::string reason;
};

inline measured_weight_choice choose_dynamic_weights(const at::Tensor& weight, const at::Tensor& bias,
                                                     const std::vector<at::Tensor>& inputs,
                                                     const std::vector<dynamic_weight_choice>& candidates,
                                                     std::int64_t samples) {
    const ::torch::NoGradGuard no_grad;
    std::vector<c10::IValue> packed;  // once per candidate: quantizing and packing cost more than a call
    for (const dynamic_weight_choice& candidate : candidates)
        packed.push_back(detail::packed_weights(weight, bias, candidate));
    std::vector<double> noise(candidates.size(), 0.0);
    double signal = 0.0;
    for (const at::Tensor& input : inputs) {
        const at::Tensor reference =
            at::linear(input, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt).to(at::kDouble);
        signal += reference.pow(2).sum().item<double>();
        for (std::size_t i = 0; i < candidates.size(); ++i)
            noise[i] += (detail::linear_dynamic_output(input, packed[i], candidates[i]).to(at::kDouble) -
                         reference)
                            .pow(2)
                            .sum()
                            .item<double>();
    }
    std::size_t best = 0;
    for (std::size_t i = 1; i < candidates.size(); ++i)
        if (noise[i] < noise[best]) best = i;
    std::string others;
    for (std::size_t i = 0; i < candidates.size(); ++i)
        if (i != best)
            others += (others.empty() ? "" : ", ") + detail::choice_text(candidates[i]) + " " +
                      sqnr_text(sqnr_db_from(signal, noise[i]));
    const std::string reason = detail::choice_text(candidates[best]) + ": layer output " +
                               sqnr_text(sqnr_db_from(signal, noise[best])) + " on " + std::to_string(samples) +
                               " calibration samples under " + engine_name(at::globalContext().qEngine()) +
                               (others.empty() ? "" : " (" + others + ")");
    return {candidates[best], reason};
}

// What each of `linears` (aten::linear nodes in the top block of `frozen`'s forward graph)
// reads on `batches`: one tensor per batch and linear. The forward graph is copied to return
// those inputs as one tuple and run as a function of the frozen module; `frozen` is not changed.
inline std::vector<std::vector<at::Tensor>> linear_inputs(const ::torch::jit::Module& frozen,
                                                          const std::vector<::torch::jit::Node*>& linears,
                                                          const std::vector<batch>& batches) {
    const std::shared_ptr<::torch::jit::Graph> graph = frozen.get_method("forward").graph();
    const std::shared_ptr<::torch::jit::Graph> copy = graph->copy();
    // A copy keeps the nodes' order: the n-th node of the original is the n-th of the copy.
    const std::vector<::torch::jit::Node*> originals(graph->nodes().begin(), graph->nodes().end());
    const std::vector<::torch::jit::Node*> copied(copy->nodes().begin(), copy->nodes().end());
    std::vector<::torch::jit::Value*> read_values;
    for (const ::torch::jit::Node* linear : linears) {
        const auto at = std::find(originals.begin(), originals.end(), linear);
        if (at == originals.end())
            throw error(error_kind::invalid_argument,
                        "linear_inputs: a linear op outside the forward graph's top block");
        read_values.push_back(copied[static_cast<std::size_t>(at - originals.begin())]->input(0));
    }
    while (!copy->outputs().empty()) copy->eraseOutput(copy->outputs().size() - 1);
    copy->registerOutput(copy->insertNode(copy->createTuple(read_values))->output());
    graph_on_module read_inputs(frozen, copy, "_versatil_linear_inputs");
    const ::torch::NoGradGuard no_grad;
    std::vector<std::vector<at::Tensor>> read(linears.size());
    for (const batch& inputs : batches) {
        const auto values = read_inputs(inputs).toTuple();
        for (std::size_t i = 0; i < linears.size(); ++i) read[i].push_back(values->elements()[i].toTensor());
    }
    return read;
}

}  // namespace versatil::libtorch
