// Cross-layer equalization (the `cle` option; Nagel et al. 2019, "Data-Free Quantization
// Through Weight Equalization and Bias Correction", section 4.1, as AIMET implements it): for
// each link layer1 -> (relu) -> layer2 of layer_graph.hpp, output channel i of layer1 (its
// weights and bias) is divided by s_i and input channel i of layer2 multiplied by s_i, with
// s_i = sqrt(r1_i * r2_i) / r2_i (r1_i, r2_i: the largest |weight| of the channel in each
// layer), so that both channels end with the range sqrt(r1_i * r2_i). relu(x / s) = relu(x) / s
// for s > 0 (and pooling and dropout commute with it too), so the float model computes the same
// function; per-tensor weight scales then fit every channel better. Chains of links are swept
// until the scales settle (each link changes the ranges its neighbours see).
//
// Applied by prepare to its folded float copy, before observers: links whose two layers sit in
// one target with the option. Through relu6 / hardtanh no link is made (they clip at a fixed
// value: relu6(x / s) * s clips at 6 s, another function); AIMET replaces ReLU6 by ReLU first,
// which changes the float model, and versatil leaves the model's function alone.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/torchscript/layer_graph.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/plan/plan.hpp"

namespace versatil::libtorch {

namespace detail {

// Largest |w| of each output channel of a layer weight [out, ...].
inline at::Tensor output_channel_ranges(const at::Tensor& weight) {
    return weight.abs().reshape({weight.size(0), -1}).amax(1);
}

// A consumer weight [out, in / groups, ...] seen as [groups, out / groups, in / groups, rest]:
// input channel g * (in / groups) + j is [g, :, j, :].
inline at::Tensor by_input_group(const at::Tensor& weight, std::int64_t groups) {
    return weight.reshape({groups, weight.size(0) / groups, weight.size(1), -1});
}

// Largest |w| of each input channel of a consumer weight fed by groups * weight.size(1) channels.
inline at::Tensor input_channel_ranges(const at::Tensor& weight, std::int64_t groups) {
    return by_input_group(weight, groups).abs().amax({1, 3}).reshape({-1});
}

inline at::Tensor scale_input_channels(const at::Tensor& weight, const at::Tensor& scale, std::int64_t groups) {
    return (by_input_group(weight, groups) * scale.reshape({groups, 1, weight.size(1), 1})).reshape(weight.sizes());
}

// A layer's weight and bias in float64 while its link scales accumulate: each parameter is
// rounded back to its own type once, at the end.
struct equalized_layer {
    ::torch::jit::Module module;
    at::Tensor weight;
    at::Tensor bias;  // undefined for a layer without bias
};

}  // namespace detail

// The scales s_i of one link: layer1's output channels are divided by them, layer2's input
// channels multiplied. A channel with an all-zero weight in either layer keeps s_i = 1.
inline at::Tensor equalization_scales(const at::Tensor& producer_weight, const at::Tensor& consumer_weight) {
    const std::int64_t groups = producer_weight.size(0) / consumer_weight.size(1);
    const at::Tensor r1 = detail::output_channel_ranges(producer_weight.to(at::kDouble));
    const at::Tensor r2 = detail::input_channel_ranges(consumer_weight.to(at::kDouble), groups);
    const at::Tensor usable = (r1 > 0) & (r2 > 0);
    return at::where(usable, at::sqrt(r1 * r2) / at::where(usable, r2, at::ones_like(r2)), at::ones_like(r1));
}

struct equalization_options {
    int max_sweeps = 100;
    double tolerance = 1e-6;  // stop when every scale of a sweep is within this of 1
};

// Equalizes, in `model` (a copy: its parameters are replaced, never written into), every link
// of its layer graph for which in_scope(producer path, consumer path) holds. Returns the chains
// equalized, each as its layers' paths, and counts the sweeps.
template <class InScope>
std::vector<std::vector<std::string>> equalize_links(::torch::jit::Module& model, const std::vector<layer_link>& links,
                                                     InScope&& in_scope, const equalization_options& options = {},
                                                     int* sweeps = nullptr) {
    const ::torch::NoGradGuard no_grad;
    std::map<std::string, detail::equalized_layer> layers;
    std::vector<layer_link> chosen;
    const auto layer = [&](const std::string& path) -> detail::equalized_layer& {
        auto found = layers.find(path);
        if (found != layers.end()) return found->second;
        ::torch::jit::Module module = find_submodule(model, path);
        const c10::IValue bias = module.attr("bias");
        return layers
            .emplace(path, detail::equalized_layer{module, module.attr("weight").toTensor().to(at::kDouble),
                                                   bias.isTensor() ? bias.toTensor().to(at::kDouble) : at::Tensor{}})
            .first->second;
    };
    for (const layer_link& link : links) {
        if (link.activation == activation_kind::clipping || !in_scope(link.producer, link.consumer)) continue;
        const at::Tensor& w1 = layer(link.producer).weight;
        const at::Tensor& w2 = layer(link.consumer).weight;
        // layer2 reads layer1's output channels: out1 = groups * in2, and its outputs split alike.
        if (w1.size(0) % w2.size(1) != 0 || w2.size(0) % (w1.size(0) / w2.size(1)) != 0) continue;
        chosen.push_back(link);
    }
    int sweep = 0;
    for (; sweep < options.max_sweeps && !chosen.empty(); ++sweep) {
        double largest_change = 0.0;
        for (const layer_link& link : chosen) {
            detail::equalized_layer& producer = layer(link.producer);
            detail::equalized_layer& consumer = layer(link.consumer);
            const at::Tensor scale = equalization_scales(producer.weight, consumer.weight);
            const std::int64_t groups = producer.weight.size(0) / consumer.weight.size(1);
            std::vector<std::int64_t> channel_shape(static_cast<std::size_t>(producer.weight.dim()), 1);
            channel_shape[0] = -1;
            producer.weight = producer.weight / scale.reshape(channel_shape);
            if (producer.bias.defined()) producer.bias = producer.bias / scale;
            consumer.weight = detail::scale_input_channels(consumer.weight, scale, groups);
            largest_change = std::max(largest_change, (scale - 1.0).abs().max().item<double>());
        }
        if (largest_change <= options.tolerance) break;
    }
    if (sweeps) *sweeps = sweep;
    for (auto& [path, equalized] : layers) {
        ::torch::jit::Module module = equalized.module;
        const at::Tensor weight = module.attr("weight").toTensor();
        module.setattr("weight", equalized.weight.to(weight.scalar_type()));
        if (equalized.bias.defined())
            module.setattr("bias", equalized.bias.to(module.attr("bias").toTensor().scalar_type()));
    }
    // Links joined into chains, in the order their first layers run.
    std::vector<std::vector<std::string>> chains;
    for (const layer_link& link : chosen) {
        const auto ends_here = std::find_if(chains.begin(), chains.end(), [&](const std::vector<std::string>& chain) {
            return chain.back() == link.producer;
        });
        if (ends_here != chains.end())
            ends_here->push_back(link.consumer);
        else
            chains.push_back({link.producer, link.consumer});
    }
    return chains;
}

// prepare's step for the `cle` option: equalizes the links of `model` (its folded float copy)
// whose two layers sit in one target that has the option, and says what it did.
inline std::vector<adjustment> equalize_for_targets(::torch::jit::Module& model, const quantization_plan& plan) {
    std::vector<std::string> targets;  // paths of the targets with the option
    for (const backend_quantizer& q : plan.quantizer.quantizers())
        if (plan.target_with(q.module_path, &target_plan::equalizes)) targets.emplace_back(q.module_path);
    if (targets.empty()) return {};
    const auto target_of = [&](const std::string& path) { return plan.target_with(path, &target_plan::equalizes); };
    const layer_graph graph = find_layer_graph(model);
    std::vector<adjustment> notes;
    for (const layer_link& link : graph.links) {
        const auto target = target_of(link.producer);
        if (link.activation == activation_kind::clipping && target && target == target_of(link.consumer))
            notes.push_back({link.producer, "cle: not equalized with " + link.consumer +
                                                 ": relu6 / hardtanh clips at a fixed value, so rescaling through it "
                                                 "would change the float model"});
    }
    int sweeps = 0;
    const auto chains = equalize_links(
        model, graph.links,
        [&](const std::string& producer, const std::string& consumer) {
            const auto target = target_of(producer);
            return target && target == target_of(consumer);
        },
        {}, &sweeps);
    for (const std::vector<std::string>& chain : chains) {
        std::string along;
        for (const std::string& path : chain) along += (along.empty() ? "" : " -> ") + path;
        notes.push_back({chain.front(), "cle: weight ranges equalized along " + along + " (" +
                                            std::to_string(sweeps) + " sweeps)"});
    }
    for (const std::string& target : targets) {
        const bool any = std::any_of(chains.begin(), chains.end(), [&](const std::vector<std::string>& chain) {
            return target_of(chain.front()) == target;
        });
        if (!any)
            notes.push_back({target, "cle: no conv/linear -> relu -> conv/linear chain to equalize in this target"});
    }
    return notes;
}

}  // namespace versatil::libtorch
