// lower: the converted model onto its engine, inside the backends' scoped environment and an
// engine scope (so the process is left as it was, even when lowering throws). LibTorch's
// Finalize packs the weights for the engine, fuses quantize/dequantize pairs with conv and
// linear (and a following relu) into quantized ops, and freezes the module; add + relu is
// then fused into quantized::add_relu. A weight left to a float kernel (a layer whose output the
// model returns in float, float_model_outputs.hpp) is unpacked once here, not on every forward.
// One forward on a sample proves the engine runs it: some unsupported configurations only fail
// there.
#pragma once

#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/csrc/jit/passes/quantization/fusion_passes.h>
#include <torch/script.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/libtorch/stages/calibrate.hpp"
#include "versatil/libtorch/stages/convert.hpp"
#include "versatil/libtorch/passes/dequantize_tuples.hpp"
#include "versatil/libtorch/passes/recurrent_dynamic.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/torchscript/graph_on_module.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"

namespace versatil::libtorch {

namespace detail {

// Each clamp (hardtanh, ReLU6, clamp) of the lowered graph reads a contiguous copy of its input;
// an in-place one then writes the copy, so later readers of its input read its output. Returns
// how many.
inline int clamps_read_contiguous_copies(const std::shared_ptr<::torch::jit::Graph>& graph) {
    const auto clamps = nodes_where(graph, [](const ::torch::jit::Node* node) {
        const std::string_view kind = node->kind().toQualString();
        return kind == "aten::hardtanh" || kind == "aten::hardtanh_" || kind == "aten::clamp" ||
               kind == "aten::clamp_" || kind == "aten::relu6" || kind == "aten::relu6_";
    });
    for (::torch::jit::Node* clamp : clamps) {
        ::torch::jit::Value* input = clamp->input(0);
        const ::torch::jit::WithInsertPoint before(clamp);
        clamp->replaceInput(0, graph->insert(c10::aten::contiguous, {input}));
        if (std::string_view(clamp->kind().toQualString()).ends_with("_"))
            input->replaceAllUsesAfterNodeWith(clamp, clamp->output());
    }
    return static_cast<int>(clamps.size());
}

}  // namespace detail

struct lowering_options {
    std::optional<batch> sample;  // a batch to prove the lowered model runs
    std::optional<int> threads;
};

namespace detail {

// Whether a lowered model runs a quantized convolution (quantized::conv2d, conv2d_relu, ...).
inline bool runs_quantized_convolution(const ::torch::jit::Module& lowered) {
    const auto is_quantized_convolution = [](const ::torch::jit::Node* node) {
        return std::string_view(node->kind().toQualString()).starts_with("quantized::conv");
    };
    for (const auto& graph : all_method_graphs(lowered))
        if (has_node_where(graph, is_quantized_convolution)) return true;
    return false;
}

// The engine failing to run a lowered model, wherever that shows: lower()'s check, or
// quantize() measuring it on other data.
inline error engine_failure(const quantization_plan& plan, const std::exception& failure) {
    return error(error_kind::lowering_failed,
                 "the " + engine_name(plan.engine) + " engine cannot run the lowered model: " + one_line(failure));
}

// A failure of LibTorch while lowering (Finalize, or the direct path packing weights).
inline error lowering_failure(const quantization_plan& plan, const std::exception& failure) {
    return error(error_kind::lowering_failed, "LibTorch cannot lower the model to the " + engine_name(plan.engine) +
                                                  " engine: " + one_line(failure));
}

// One forward proves the engine runs the lowered model: some unsupported configurations only
// fail there. It runs the first sample of options.sample: what it proves (that the engine
// takes each lowered op with its qparams) does not depend on the batch size, and a forward
// over a whole calibration batch costs what calibrating that batch does (resnet_cnn, 32
// images: 4.6 ms on x86, 8.9 ms on QNNPACK, against ~1 ms for one; a torchvision model at
// 224×224, most of a second). A model that cannot run one sample (a reshape to a fixed batch
// size, an input not batched along dim 0) is checked on the whole batch, whose failure is the
// one reported. A model with quantized convolutions runs the check on a deep copy
// (fresh packed weights): oneDNN's quantized conv keeps the primitive of its first input shape,
// so a check at one shape would slow every later call at another one. The copy repacks every
// weight, so models without convolutions run the check themselves.
inline void check_lowered_runs(const ::torch::jit::Module& lowered, const quantization_plan& plan,
                               const lowering_options& options) {
    if (!options.sample) return;
    const ::torch::NoGradGuard no_grad;
    const bool on_a_copy = runs_quantized_convolution(lowered);
    // The model's own forward is not run: its later runs keep the executor they would have had
    // (graph_on_module.hpp).
    const auto run = [&](const batch& inputs) {
        const ::torch::jit::Module checked = on_a_copy ? lowered.deepcopy() : lowered;
        graph_on_module(checked, checked.get_method("forward").graph(), "_versatil_check")(inputs);
    };
    try {
        if (options.sample->samples() > 1) {
            try {
                run(options.sample->rows(0, 1));
                return;
            } catch (const std::exception&) {
                // checked on the whole batch below, whose failure is the one to report
            }
        }
        run(*options.sample);
    } catch (const std::exception& failure) {
        throw engine_failure(plan, failure);
    }
}

// Finalize edits the graphs of the module it is given before it freezes a copy of it.
inline lowered_model lower(const converted_model& converted, bool in_place, const lowering_options& options) {
    const quantization_plan& plan = converted.plan;
    const auto environment = plan.quantizer.environment_context();
    const engine_scope engine(engine_settings{plan.engine, options.threads, std::nullopt});
    ::torch::jit::Module module = in_place ? converted.module : converted.module.clone();
    ::torch::jit::Module lowered;
    std::vector<adjustment> adjustments = converted.adjustments;
    std::vector<recurrent_layer> recurrent;
    try {
        lowered = ::torch::jit::Finalize(module, plan.quant_type);
        auto graph = lowered.get_method("forward").graph();
        ::torch::jit::FuseQuantizedAddRelu(graph);
        detail::dequantize_tuples_item_by_item(graph);
        unpack_weights_once(lowered);
        recurrent = quantize_recurrent_layers(lowered, plan);
        for (const auto& [path, target] : plan.targets) {
            const std::string_view because = target.lowering->clamps_read_contiguous_copies_because;
            if (because.empty()) continue;
            if (const int count = detail::clamps_read_contiguous_copies(graph); count > 0)
                adjustments.push_back({"", std::to_string(count) + " clamp(s) (ReLU6, hardtanh, clamp) read a "
                                                                   "contiguous copy of their input: " +
                                               std::string(because)});
            break;
        }
    } catch (const std::exception& failure) {
        throw lowering_failure(plan, failure);
    }
    check_lowered_runs(lowered, plan, options);
    note_float_recurrent_layers(recurrent, plan, adjustments);
    return {lowered, plan, std::move(adjustments), std::nullopt, std::move(recurrent)};
}

}  // namespace detail

// The converted model stays as it was: lowering works on a copy of every weight.
inline lowered_model lower(const converted_model& converted, const lowering_options& options = {}) {
    return detail::lower(converted, false, options);
}

// A converted model handed over is lowered in place, without that copy.
inline lowered_model lower(converted_model&& converted, const lowering_options& options = {}) {
    return detail::lower(converted, true, options);
}

}  // namespace versatil::libtorch
