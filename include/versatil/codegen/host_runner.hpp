// Runs a graph on the host with the firmware's kernels and the firmware's arena plan: a loop
// over the lowered layers, each kernel called with the same params and the same (possibly
// overlapping) arena addresses as the exported header's model::run, so the outputs are
// bit-identical to the compiled model's on the same input. Also the input's quantization
// (float CHW to int8 levels, as ATen's quantize_per_tensor) and the output's dequantization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "versatil/codegen/figures.hpp"
#include "versatil/codegen/integer_graph.hpp"
#include "versatil/codegen/lower.hpp"
#include "versatil/firmware/firmware.hpp"
#include "versatil/firmware/kernel_choice.hpp"
#include "versatil/math/quantize.hpp"

namespace versatil::codegen {

// `input` in the graph's layout (lowered_graph::layout: channel-last for input_layout::hwc).
inline std::vector<std::int8_t> run_on_host(const lowered_graph& g, std::span<const std::int8_t> input) {
    const firmware::shape in_shape = g.tensors[static_cast<std::size_t>(g.input)];
    if (input.size() != in_shape.bytes())
        throw std::invalid_argument("versatil::codegen::run_on_host: " + std::to_string(input.size()) +
                                    " input levels, the graph takes " + std::to_string(in_shape.bytes()));
    const host_plan plan = plan_arena(g);
    std::vector<std::int8_t> arena(plan.figures.arena_bytes);
    const auto at = [&](int t) -> std::int8_t* {
        const firmware::placement& p = plan.tensors[static_cast<std::size_t>(t)];
        return p.external ? nullptr : arena.data() + p.offset;
    };
    const auto read = [&](int t) -> const std::int8_t* {
        const firmware::placement& p = plan.tensors[static_cast<std::size_t>(t)];
        return p.external ? input.data() + p.offset : arena.data() + p.offset;
    };
    for (const lowered_layer& layer : g.layers) {
        const layer_params params = bound(layer);
        std::visit(
            [&](const auto& p) {
                using P = std::decay_t<decltype(p)>;
                const std::int8_t* in = read(layer.inputs[0]);
                std::int8_t* out = at(layer.output);
                if constexpr (std::is_same_v<P, firmware::conv2d_params>)
                    firmware::run(layer.kernel, p, in, out, layer.scratch >= 0 ? at(layer.scratch) : nullptr);
                else if constexpr (std::is_same_v<P, firmware::linear_params>) firmware::run(layer.linear_kernel, p, in, out);
                else if constexpr (std::is_same_v<P, firmware::add_params>) firmware::add(p, in, read(layer.inputs[1]), out);
                else if constexpr (std::is_same_v<P, firmware::clamp_params>) firmware::clamp(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::max_pool2d_params>) firmware::max_pool2d(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::avg_pool2d_params>) firmware::avg_pool2d(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::lookup_params>) firmware::lookup(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::mul_params>) firmware::mul(p, in, read(layer.inputs[1]), out);
                else if constexpr (std::is_same_v<P, firmware::softmax_params>) firmware::softmax(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::permute_params>) firmware::permute(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::pad_params>) firmware::pad(p, in, out);
                else if constexpr (std::is_same_v<P, firmware::concat_params>) {
                    const std::int8_t* parts[firmware::max_concat_parts] = {};
                    for (std::size_t k = 0; k < layer.inputs.size(); ++k) parts[k] = read(layer.inputs[k]);
                    firmware::concat(p, parts, out);
                } else {
                    static_assert(std::is_same_v<P, view_params>);  // a view: nothing to run
                }
            },
            params);
    }
    const std::int8_t* result = read(g.output);
    return {result, result + g.tensors[static_cast<std::size_t>(g.output)].bytes()};
}

inline std::vector<std::int8_t> run_on_host(const integer_graph& graph, std::span<const std::int8_t> input) {
    return run_on_host(lower(graph), input);
}

// Float input (C, H, W of batch 1) to the graph input's int8 levels.
inline std::vector<std::int8_t> quantize_input(const integer_graph& graph, std::span<const float> input) {
    validate(graph);
    const activation_tensor& t = graph.tensors[static_cast<std::size_t>(graph.input)];
    if (input.size() != static_cast<std::size_t>(t.shape.elements()))
        throw std::invalid_argument("versatil::codegen::quantize_input: " + std::to_string(input.size()) +
                                    " values, the graph takes " + std::to_string(t.shape.elements()));
    std::vector<std::int8_t> levels;
    levels.reserve(input.size());
    for (float x : input)
        levels.push_back(static_cast<std::int8_t>(math::quantize(x, {static_cast<float>(t.scale), t.zero_point}, {-128, 127})));
    return levels;
}

// The graph output's levels back to real values.
inline std::vector<float> dequantize_output(const integer_graph& graph, std::span<const std::int8_t> output) {
    const activation_tensor& t = graph.tensors.at(static_cast<std::size_t>(graph.output));
    std::vector<float> values;
    values.reserve(output.size());
    for (std::int8_t level : output) values.push_back(static_cast<float>(t.scale * (level - t.zero_point)));
    return values;
}

}  // namespace versatil::codegen
