// Exports a model quantized for a microcontroller as firmware: its integer graph
// (extract.hpp) turned into one self-contained C++ header by the code generator
// (versatil::codegen::header_for), with the figures of its memory plan and the agreement of
// the firmware runtime, run on this host, with LibTorch's quantized model on the evaluation
// data (int8 outputs compared: LibTorch's quint8 levels less 128).
#pragma once

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/codegen/figures.hpp"
#include "versatil/codegen/header_writer.hpp"
#include "versatil/codegen/host_runner.hpp"
#include "versatil/libtorch/export/extract.hpp"
#include "versatil/libtorch/analysis/report.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"

namespace versatil::libtorch {

struct firmware_export {
    std::string header;             // the C++ header: namespace NAME { struct model; }
    codegen::integer_graph graph;   // what the header was generated from
    firmware_report report;
};

namespace detail {

// The lowered model's int8 output levels on `inputs` (a batch): its forward up to the
// dequantize of the output (or its float softmax after it, on the int8 softmax's grid), run by
// the TorchScript interpreter. LibTorch's quint8 levels less 128, as the firmware's int8 ones.
inline at::Tensor int8_output_levels(const lowered_model& lowered, const at::Tensor& inputs) {
    auto graph = lowered.module.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    if (graph->outputs().size() == 1 && graph->outputs()[0]->node()->kind() == c10::aten::softmax) {
        // LibTorch's float softmax of the dequantized logits, on the firmware softmax's int8 grid
        // (scale 1/256, zero point -128) by LibTorch's own rounding.
        const ::torch::NoGradGuard no_grad;
        ::torch::jit::Module module = lowered.module;
        const at::Tensor probabilities = module.forward({inputs}).toTensor();
        const at::Tensor levels = at::quantize_per_tensor(probabilities, firmware::softmax_output_scale,
                                                          firmware::softmax_output_zero_point + 128, at::kQUInt8)
                                      .int_repr()
                                      .to(at::kInt);
        return (levels - 128).reshape({probabilities.size(0), -1}).contiguous();
    }
    ::torch::jit::Node* dequantize = graph->outputs()[0]->node();
    if (graph->outputs().size() != 1 || dequantize->kind() != c10::aten::dequantize)
        throw error(error_kind::unsupported_export,
                    "cannot export for firmware: the model's output is not an int8 tensor");
    graph->eraseOutput(0);
    graph->registerOutput(dequantize->input(0));
    const ::torch::jit::Code code(graph, "versatil_int8_output");
    std::vector<c10::IValue> stack{lowered.module._ivalue(), inputs};
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::InterpreterState(code).run(stack);
    const at::Tensor output = stack.at(0).toTensor();
    const at::Tensor levels = output.int_repr().to(at::kInt);
    return (output.scalar_type() == c10::kQUInt8 ? levels - 128 : levels).reshape({output.size(0), -1}).contiguous();
}

// The int8 levels LibTorch's own quantize_per_tensor gives the input: the same function, so the
// runtime and LibTorch start from the same bytes; for a channel-last header, images transposed
// to (height, width, channels).
inline at::Tensor int8_input_levels(const codegen::activation_tensor& input, const at::Tensor& inputs,
                                    codegen::input_layout layout) {
    const at::Tensor quantized = at::quantize_per_tensor(inputs, input.scale, input.zero_point + 128, at::kQUInt8);
    at::Tensor levels = (quantized.int_repr().to(at::kInt) - 128).to(at::kChar);
    if (layout == codegen::input_layout::hwc && levels.dim() == 4) levels = levels.permute({0, 2, 3, 1});
    return levels.reshape({inputs.size(0), -1}).contiguous();
}

inline std::int64_t first_max(const std::int8_t* levels, std::int64_t count) {
    return std::max_element(levels, levels + count) - levels;
}

}  // namespace detail

// Exports `lowered` (quantized from `float_model` for a microcontroller) as a header in
// namespace `namespace_name`, and compares the firmware runtime with LibTorch on `evaluation`
// (at least one batch). An error(unsupported_export) when firmware cannot run the model, an
// error(invalid_argument) for a namespace that is not a C++ namespace name. `layout`: the order
// of the header's input levels (hwc: channel-last, read in place by the first convolution).
inline firmware_export export_firmware(const ::torch::jit::Module& float_model, const lowered_model& lowered,
                                       const std::vector<batch>& evaluation, std::string_view namespace_name,
                                       codegen::input_layout layout = codegen::input_layout::chw) {
    if (evaluation.empty())
        throw error(error_kind::no_evaluation_data,
                    "the firmware export compares the runtime with LibTorch: give "
                    "evaluation batches (the data file's 'test') or calibration batches");
    const auto start = std::chrono::steady_clock::now();
    // Firmware models compute in float32: data of another floating type is converted, as quantize() does.
    std::vector<at::Tensor> inputs;
    for (const batch& b : evaluation) {
        if (b.arity() != 1)
            throw error(error_kind::unsupported_export, "cannot export for firmware: the model takes " +
                                                            std::to_string(b.arity()) +
                                                            " inputs; firmware models take one tensor");
        inputs.push_back(at::isFloatingType(b.input().scalar_type()) ? b.input().to(at::kFloat) : b.input());
    }
    firmware_export result;
    result.graph = extract_integer_graph(float_model, lowered, batch(inputs.front()));
    codegen::lowered_graph integer;
    try {
        integer = codegen::lower(result.graph, layout);
    } catch (const std::invalid_argument& failure) {
        throw error(error_kind::unsupported_export, std::string("cannot export for firmware: ") + failure.what());
    }
    try {
        result.header = codegen::header_for(integer, namespace_name);
    } catch (const std::invalid_argument& failure) {
        throw error(error_kind::invalid_argument, failure.what());
    }
    const codegen::firmware_figures figures = codegen::summarize(integer);
    firmware_report& report = result.report;
    report.namespace_name = std::string(namespace_name);
    report.input_layout = layout == codegen::input_layout::hwc ? "hwc" : "chw";
    report.header_bytes = static_cast<std::int64_t>(result.header.size());
    report.arena_bytes = static_cast<std::int64_t>(figures.arena_bytes);
    report.arena_lower_bound_bytes = static_cast<std::int64_t>(figures.arena_lower_bound_bytes);
    report.greedy_planner_bytes = static_cast<std::int64_t>(figures.greedy_planner_bytes);
    report.parameter_bytes = static_cast<std::int64_t>(figures.parameter_bytes);
    report.stack_bytes = static_cast<std::int64_t>(codegen::stack_bytes(integer));
    report.export_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // The runtime on this host against LibTorch, sample by sample, from the same input bytes.
    const engine_scope engine(lowered.plan.engine);
    std::int64_t agreeing = 0;
    const codegen::activation_tensor& input_quantization =
        result.graph.tensors.at(static_cast<std::size_t>(result.graph.input));
    for (const at::Tensor& rows : inputs) {
        const at::Tensor input = detail::int8_input_levels(input_quantization, rows, layout);
        const at::Tensor expected = detail::int8_output_levels(lowered, rows);
        for (std::int64_t i = 0; i < input.size(0); ++i) {
            const at::Tensor row = input[i];
            const std::vector<std::int8_t> output = codegen::run_on_host(
                integer,
                std::span<const std::int8_t>(row.data_ptr<std::int8_t>(), static_cast<std::size_t>(row.numel())));
            const at::Tensor reference = expected[i].to(at::kChar).contiguous();
            const std::int8_t* wanted = reference.data_ptr<std::int8_t>();
            if (static_cast<std::int64_t>(output.size()) != reference.numel())
                throw error(error_kind::unsupported_export, "cannot export for firmware: the runtime gives " +
                                                                std::to_string(output.size()) + " outputs, LibTorch " +
                                                                std::to_string(reference.numel()));
            for (std::size_t j = 0; j < output.size(); ++j) {
                const int difference = std::abs(int{output[j]} - int{wanted[j]});
                report.max_lsb_diff = std::max(report.max_lsb_diff, difference);
                report.differing_elements += difference != 0 ? 1 : 0;
            }
            const auto count = static_cast<std::int64_t>(output.size());
            agreeing += detail::first_max(output.data(), count) == detail::first_max(wanted, count) ? 1 : 0;
            report.compared_elements += count;
            ++report.compared_samples;
        }
    }
    report.top1_agreement = static_cast<double>(agreeing) / static_cast<double>(report.compared_samples);
    return result;
}

}  // namespace versatil::libtorch
