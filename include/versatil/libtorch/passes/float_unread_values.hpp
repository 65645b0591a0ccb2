// A value that no conv / linear reads stays in float where its backend's quantizer leaves it so.
//
// LibTorch 1.13's graph mode rounds the result of every op it has a quantized kernel for: add,
// mul, layer_norm, hardswish and the rest. X86InductorQuantizer, whose scheme the x86_inductor
// backend follows, quantizes activations where a conv / linear reads them, and propagates that
// through int8-in-int8-out ops (pooling, cat, flatten) after one; the result of another op that
// no conv / linear reads stays fp32. A transformer's residual stream is such a value: the sum
// `x + attention(x)` is read by the next layer_norm and the next sum, never by a linear layer.
// Rounded to one 8-bit grid per tensor, it lost most of torchvision's ViT: its class token is
// small beside the patch tokens and drowns in their grid (9.4 dB output SQNR, as PyTorch's own
// quantize_jit gives; 32 dB with those values in float).
//
// Here, after InsertQuantDeQuant, such a value's quantize / dequantize pair goes: the op that
// computes it then runs its float kernel on its (dequantized) inputs, and its readers get the
// float result. A value a conv / linear computes keeps its rounding (LibTorch has no int8 conv /
// linear kernel with a float output; float_model_outputs.hpp covers what the model returns). A
// value whose quantized form something other than a dequantize reads (its qparams, a
// requantization) keeps it too, as does one read inside `if` or loop blocks, which this walk does
// not follow: there the rounding may be what a layer reads.
//
// Static post-training targets only: QAT trains the model with LibTorch's rounding of every
// such value (its prepare fake-quantizes them all), and dynamic targets leave activations float.
#pragma once

#include <torch/csrc/jit/passes/quantization/helper.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/passes/float_model_outputs.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/plan/backend_lowering.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/plan/plan.hpp"

namespace versatil::libtorch {

namespace detail {

// The op that computes `value`, seen through ops that only move or select values (dropout,
// flatten, permute, select: LibTorch's pass-through ops, after which it observes a value).
inline ::torch::jit::Node* computing_op(::torch::jit::Value* value) {
    std::unordered_set<const ::torch::jit::Value*> seen;
    while (seen.insert(value).second) {
        const std::vector<::torch::jit::Value*> sources = ::torch::jit::getPassThroughInputs(value);
        if (sources.size() != 1) break;
        value = sources.front();
    }
    return value->node();
}

// Ops that read a tensor's shape only: they see the same in float.
inline bool reads_shape_only(const ::torch::jit::Node* node) {
    return node->kind() == c10::aten::dim || node->kind() == c10::aten::size || node->kind() == c10::aten::len;
}

// Whether a conv / linear reads `value` (a dequantized value), directly, through pass-through
// ops, or through a quantize / dequantize pair that LibTorch put after one of those; anything
// this walk does not follow counts as a reader.
inline bool layer_reads(::torch::jit::Value* value, std::unordered_set<const ::torch::jit::Value*>& seen) {
    if (!seen.insert(value).second) return false;
    for (const ::torch::jit::Use& use : value->uses()) {
        ::torch::jit::Node* reader = use.user;
        if (is_quantizable_op(reader->kind().toQualString()) || !reader->blocks().empty()) return true;
        if (reader->kind() == c10::aten::quantize_per_tensor) {
            for (const ::torch::jit::Use& requantized : reader->output()->uses())
                if (requantized.user->kind() != c10::aten::dequantize || layer_reads(requantized.user->output(), seen))
                    return true;
            continue;
        }
        for (::torch::jit::Value* output : reader->outputs()) {
            const std::vector<::torch::jit::Value*> sources = ::torch::jit::getPassThroughInputs(output);
            if (std::find(sources.begin(), sources.end(), value) != sources.end() && layer_reads(output, seen))
                return true;
        }
    }
    return false;
}

// Whether `quantize` rounds a value computed by an op other than a conv / linear (or its fused
// activation) from tensors, which only dequantize ops (and shape queries) read, and no conv /
// linear after them.
inline bool rounds_value_no_layer_reads(::torch::jit::Node* quantize) {
    const ::torch::jit::Node* op = computing_op(quantize->input(0));
    const bool from_tensors = std::any_of(
        op->inputs().begin(), op->inputs().end(),
        [](const ::torch::jit::Value* input) { return input->type()->kind() == c10::TypeKind::TensorType; });
    if (!from_tensors || op->kind() == c10::aten::dequantize || op->kind() == c10::aten::quantize_per_tensor ||
        is_quantizable_op(op->kind().toQualString()) || layer_op_computing(op->output(0)))
        return false;
    std::unordered_set<const ::torch::jit::Value*> seen;
    for (const ::torch::jit::Use& use : quantize->output()->uses()) {
        if (reads_shape_only(use.user)) continue;
        if (use.user->kind() != c10::aten::dequantize || layer_reads(use.user->output(), seen)) return false;
    }
    return true;
}

}  // namespace detail

// In `converted`'s forward (inlined by InsertQuantDeQuant), removes the quantize / dequantize
// pair of every value no conv / linear reads (see above) that a static post-training target
// computes whose backend leaves such values in float
// (lowering_traits::unread_values_stay_float_because). Returns, per target, how many values of
// which ops it left in float, and why.
inline std::vector<adjustment> leave_unread_values_float(const ::torch::jit::Module& converted,
                                                          const quantization_plan& plan) {
    const std::shared_ptr<::torch::jit::Graph> graph = converted.get_method("forward").graph();
    std::map<std::string, std::map<std::string, int>> kept_by_target;  // target path -> op kind -> values
    std::map<std::string, std::string_view> because;
    for (::torch::jit::Node* quantize : nodes_where(graph, [](const ::torch::jit::Node* node) {
             return node->kind() == c10::aten::quantize_per_tensor;
         })) {
        if (!detail::rounds_value_no_layer_reads(quantize)) continue;
        const ::torch::jit::Node* op = detail::computing_op(quantize->input(0));
        const target_plan* target = plan.target_for(call_stack_path(op).value_or(""));
        if (!target || target->dynamic || target->qat) continue;
        const std::string_view reason = target->lowering->unread_values_stay_float_because;
        if (reason.empty()) continue;
        ::torch::jit::Value* unrounded = quantize->input(0);
        for (const ::torch::jit::Use& use : std::vector<::torch::jit::Use>(quantize->output()->uses()))
            if (use.user->kind() == c10::aten::dequantize) {
                use.user->output()->replaceAllUsesWith(unrounded);
                use.user->destroy();
            }
        quantize->output()->replaceAllUsesWith(unrounded);  // the shape queries
        quantize->destroy();
        const std::string& path = target->path;
        ++kept_by_target[path][op->kind().toUnqualString()];
        because[path] = reason;
    }
    std::vector<adjustment> notes;
    for (const auto& [path, kinds] : kept_by_target) {
        int values = 0;
        std::string ops;
        for (const auto& [kind, count] : kinds) {
            values += count;
            ops += (ops.empty() ? "" : ", ") + kind + " x" + std::to_string(count);
        }
        notes.push_back({path, std::to_string(values) + " value(s) no conv / linear reads kept in float (" + ops +
                                   "): " + std::string(because.at(path))});
    }
    return notes;
}

}  // namespace versatil::libtorch
