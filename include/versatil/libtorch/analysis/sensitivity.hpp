// Per-layer sensitivity from one calibration: the model's output SQNR with only one layer
// quantized, for every layer, without quantizing the model again per layer. The converted
// model (convert.hpp) computes in float what the lowered model computes in integers: each
// value is quantized and dequantized where the engine quantizes it, with the qparams the
// calibration gave. Here every one of those quantize ops gets a switch, all off (the value
// passes as it is), and each layer's switches are turned on in turn: one evaluation pass per
// layer, where the previous analysis prepared, calibrated, converted and lowered the model once
// per layer.
//
// A layer's quantize ops are those of the values its quantizable ops read and produce: their
// inputs and weights (before any op that passes quantization through, such as flatten or max
// pool) and their outputs (after an activation fused with them, such as conv + relu), with the
// requantizations that follow in the engine (average pooling after the layer runs quantized
// and puts its result on the layer's grid). Each is quantized with the whole model's qparams:
// what the deployed model does there. A value quantized once for several readers is quantized
// for all of them, as when the layer is quantized alone.
//
// The accuracy target's greedy search (accuracy_target.hpp) switches the other way: every layer
// on but those kept in float (keep_in_float), one evaluation pass per candidate layer.
#pragma once

#include <torch/csrc/jit/passes/quantization/helper.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/passes/clamped_observation.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/analysis/report.hpp"

namespace versatil::libtorch {

namespace detail {

inline bool is_quantize(const ::torch::jit::Node* node) {
    return node->kind() == c10::aten::quantize_per_tensor || node->kind() == c10::aten::quantize_per_channel;
}

inline bool inside(std::string_view path, std::string_view layer) {
    return path == layer || (path.size() > layer.size() && path.starts_with(layer) && path[layer.size()] == '.');
}

// A requantization: a quantize op whose scale is another quantized value's (q_scale), as convert
// puts after average pooling.
inline bool requantizes(const ::torch::jit::Node* quantize) {
    return quantize->kind() == c10::aten::quantize_per_tensor &&
           quantize->input(1)->node()->kind() == c10::aten::q_scale;
}

// Whether `node` reads a quantized tensor's qparams (q_scale, q_zero_point, dtype), not its values.
inline bool reads_qparams(const ::torch::jit::Node* node) {
    const c10::Symbol kind = node->kind();
    return kind == c10::aten::q_scale || kind == c10::aten::q_zero_point || kind == c10::prim::dtype;
}

// A clamp's bound as convert leaves it, put on the clamped value's grid (scalar_tensor,
// quantize_per_tensor, dequantize, item): the value the bound was before. Any other as it is.
inline ::torch::jit::Value* bound_before_quantization(::torch::jit::Value* bound) {
    const ::torch::jit::Node* item = bound->node();
    if (item->kind() != c10::aten::item) return bound;
    const ::torch::jit::Node* dequantize = item->input(0)->node();
    if (dequantize->kind() != c10::aten::dequantize) return bound;
    const ::torch::jit::Node* quantize = dequantize->input(0)->node();
    if (quantize->kind() != c10::aten::quantize_per_tensor) return bound;
    const ::torch::jit::Node* scalar = quantize->input(0)->node();
    return scalar->kind() == c10::aten::scalar_tensor ? scalar->input(0) : bound;
}

// The hull of the intervals of the ops reading what `quantize` produced, directly or through a
// dequantize, if every reader but those of its qparams has one: the interval to which
// clamp_observed_values clamped the values its observer saw (clamped_observation.hpp).
inline std::optional<constant_outside> interval_observed(const ::torch::jit::Node* quantize) {
    std::optional<constant_outside> hull;
    for (const ::torch::jit::Use& use : quantize->output()->uses()) {
        const bool dequantizes = use.user->kind() == c10::aten::dequantize;
        if (reads_qparams(use.user) || (dequantizes && use.user->output()->uses().empty())) continue;
        const std::optional<constant_outside> interval =
            dequantizes
                ? interval_of_readers(use.user->output(), bound_before_quantization)
                : interval_of_reader(use.user, quantize->output(), bound_before_quantization);
        if (!interval) return std::nullopt;
        hull = hull ? constant_outside{std::min(hull->low, interval->low), std::max(hull->high, interval->high)}
                    : *interval;
    }
    return hull;
}

// Whether `clamp`, reading `quantize`'s output (dequantized or not), clamps to the interval the
// observer of that output saw (interval_observed): then the clamp's output is on the grid an
// observer after it would choose from the same values.
inline bool clamps_as_observed(const ::torch::jit::Node* clamp, const ::torch::jit::Value* read,
                               const ::torch::jit::Node* quantize) {
    if (!is_clamp(clamp) || requantizes(quantize)) return false;
    const std::optional<constant_outside> interval = interval_of_reader(clamp, read, bound_before_quantization);
    const std::optional<constant_outside> observed = interval_observed(quantize);
    return interval && observed && *interval == *observed;
}

// Whether `requantization` puts a clamp's output on the grid an observer of that output would
// choose from the same values: the clamp (ReLU6, hardtanh, clamp) reads the dequantized output
// of a quantize op whose observer saw the values clamped to this clamp's interval. convert
// writes MobileNetV2's conv + ReLU6 so: the convolution's output quantized, dequantized,
// clamped, and requantized with its qparams.
inline bool requantizes_clamp_as_observed(const ::torch::jit::Node* requantization) {
    const ::torch::jit::Node* clamp = requantization->input(0)->node();
    if (clamp->inputs().empty()) return false;
    const ::torch::jit::Node* dequantize = clamp->input(0)->node();
    if (dequantize->kind() != c10::aten::dequantize) return false;
    const ::torch::jit::Node* quantize = dequantize->input(0)->node();
    return is_quantize(quantize) && requantization->input(1)->node()->input(0) == quantize->output() &&
           clamps_as_observed(clamp, dequantize->output(), quantize);
}

// Ops that pass quantization through and hand on the values they read, only arranged
// otherwise: an observer after them sees what one before them does. The other pass-through ops
// (max or average pooling, mean, a clamp) change the values: the engine runs them on their
// input's grid, where a layer quantized alone has its input observed after them, on a grid of
// its own.
inline bool keeps_values(const ::torch::jit::Node* node) {
    static const std::set<std::string_view> kinds{"aten::flatten",   "aten::view",       "aten::reshape",
                                                  "aten::squeeze",   "aten::squeeze_",   "aten::unsqueeze",
                                                  "aten::unsqueeze_", "aten::transpose", "aten::transpose_",
                                                  "aten::permute",   "aten::contiguous", "aten::t",
                                                  "aten::detach"};
    return kinds.contains(node->kind().toQualString());
}

// Whether the values between `quantize` and the value a layer reads (`path`, from that value
// back) are read only along the path, apart from the quantize op's qparams. Quantized alone, the
// layer's input is observed at the end of the path; here switching `quantize` on quantizes
// every reader of it.
inline bool read_only_along(const std::vector<::torch::jit::Value*>& path, const ::torch::jit::Node* quantize) {
    std::vector<const ::torch::jit::Value*> values(path.begin(), path.end());
    values.push_back(quantize->output());
    for (std::size_t i = 1; i < values.size(); ++i) {
        const ::torch::jit::Node* op_on_path = values[i - 1]->node();
        for (const ::torch::jit::Use& use : values[i]->uses())
            if (!reads_qparams(use.user) && use.user != op_on_path) return false;
    }
    return true;
}

// The quantize op whose result `value` is, through ops that keep a quantized tensor quantized
// (flatten, view, max pool, average pool: LibTorch's pass-through ops), or none.
// `borrowed_grid` is set when the value is not on the grid the reader would have quantized
// alone: reached through an op that changes values (average pooling, max pooling: but for
// keeps_values and clamps_as_observed) or a requantization (but requantizes_clamp_as_observed),
// or through values other ops read too.
inline ::torch::jit::Node* quantized_by(::torch::jit::Value* value, bool& borrowed_grid) {
    std::unordered_set<const ::torch::jit::Value*> seen;
    std::vector<::torch::jit::Value*> path;  // the values from the one read back, the quantize op's excluded
    while (seen.insert(value).second) {
        ::torch::jit::Node* node = value->node();
        if (is_quantize(node)) {
            borrowed_grid = borrowed_grid || (requantizes(node) && !requantizes_clamp_as_observed(node)) ||
                            (!path.empty() && !read_only_along(path, node));
            return node;
        }
        const std::vector<::torch::jit::Value*> sources = ::torch::jit::getPassThroughInputs(value);
        if (sources.size() != 1) return nullptr;
        // A ReLU running on the quantized tensor (after an add, in RegNet) keeps the grid when
        // its input's observer saw the values clamped as it clamps them.
        const ::torch::jit::Node* source = sources.front()->node();
        const bool same_grid =
            keeps_values(node) || (is_quantize(source) && clamps_as_observed(node, sources.front(), source));
        borrowed_grid = borrowed_grid || !same_grid;
        path.push_back(value);
        value = sources.front();
    }
    return nullptr;
}

// The quantize ops of a quantizable op's inputs (each read through a dequantize); in
// `read_through_ops`, those read through ops that pass quantization through (max pool, flatten).
inline void input_quantizers(::torch::jit::Node* op, std::set<::torch::jit::Node*>& found, bool& borrowed_grid,
                             std::set<::torch::jit::Node*>& read_through_ops) {
    for (::torch::jit::Value* input : op->inputs())
        if (input->node()->kind() == c10::aten::dequantize)
            if (::torch::jit::Node* quantize = quantized_by(input->node()->input(0), borrowed_grid)) {
                found.insert(quantize);
                if (quantize->output() != input->node()->input(0)) read_through_ops.insert(quantize);
            }
}

// The quantize ops of a quantizable op's output, through ops that pass quantization through.
inline void output_quantizers(::torch::jit::Value* value, std::set<::torch::jit::Node*>& found,
                              std::unordered_set<const ::torch::jit::Value*>& seen) {
    if (!seen.insert(value).second) return;
    for (const ::torch::jit::Use& use : value->uses()) {
        if (is_quantize(use.user) && use.offset == 0) {
            found.insert(use.user);
            continue;
        }
        for (::torch::jit::Value* output : use.user->outputs()) {
            const std::vector<::torch::jit::Value*> sources = ::torch::jit::getPassThroughInputs(output);
            if (std::find(sources.begin(), sources.end(), value) != sources.end())
                output_quantizers(output, found, seen);
        }
    }
}

// The ops that read the qparams (q_scale, q_zero_point, dtype) of what `quantize` produced,
// through ops that pass quantization through.
inline std::vector<::torch::jit::Node*> qparams_readers(::torch::jit::Node* quantize) {
    std::vector<::torch::jit::Node*> readers;
    std::vector<::torch::jit::Value*> pending{quantize->output()};
    std::unordered_set<const ::torch::jit::Value*> seen;
    while (!pending.empty()) {
        ::torch::jit::Value* value = pending.back();
        pending.pop_back();
        if (!seen.insert(value).second) continue;
        for (const ::torch::jit::Use& use : value->uses()) {
            if (reads_qparams(use.user)) {
                readers.push_back(use.user);
                continue;
            }
            for (::torch::jit::Value* output : use.user->outputs()) {
                const std::vector<::torch::jit::Value*> sources = ::torch::jit::getPassThroughInputs(output);
                if (std::find(sources.begin(), sources.end(), value) != sources.end()) pending.push_back(output);
            }
        }
    }
    return readers;
}

// The quantize ops that requantize what `quantize` produced with its qparams: an op that
// computes new values from a quantized tensor (average pooling, mean) runs quantized in the
// engine, its result put on the same grid.
inline void add_requantizations(::torch::jit::Node* quantize, std::set<::torch::jit::Node*>& found) {
    for (::torch::jit::Node* reader : qparams_readers(quantize)) {
        if (reader->kind() != c10::aten::q_scale) continue;
        for (const ::torch::jit::Use& use : reader->output()->uses())
            if (is_quantize(use.user) && use.offset == 1 && found.insert(use.user).second)
                add_requantizations(use.user, found);
    }
}

}  // namespace detail

// A copy of a converted model whose quantize ops can be switched off and on, by layer. The
// model is a post-training calibration's (QAT runs have no per-layer analysis): its observers saw
// values read only by clamps clamped (clamped_observation.hpp), which stands_for_alone relies on.
class switchable_quantization {
public:
    switchable_quantization(const ::torch::jit::Module& converted, const std::vector<std::string>& layers,
                            ::torch::jit::QuantType quant_type)
        : module_(converted.clone()) {
        using namespace detail;
        // Dynamic targets have their own switches (dynamic_switches.hpp): a dynamic op's output
        // stays float, which this model of quantize ops around an op does not follow.
        if (quant_type != ::torch::jit::QuantType::STATIC)
            throw error(error_kind::invalid_argument,
                        "per-layer sensitivity from one calibration is for static targets");
        const std::shared_ptr<::torch::jit::Graph> graph = module_.get_method("forward").graph();
        for (::torch::jit::Node* op : nodes_where(graph, [&](::torch::jit::Node* node) {
                 return ::torch::jit::nodeQuantizable(node, quant_type);
             })) {
            std::set<::torch::jit::Node*> quantizers, read_through_ops;
            bool input_on_borrowed_grid = false;
            input_quantizers(op, quantizers, input_on_borrowed_grid, read_through_ops);
            // An input on a grid observed elsewhere (after average pooling) is observed at the
            // op's input once its producer is float: as if read through ops.
            if (input_on_borrowed_grid) read_through_ops.insert(quantizers.begin(), quantizers.end());
            std::set<::torch::jit::Node*> outputs;
            for (::torch::jit::Value* output : op->outputs()) {
                std::unordered_set<const ::torch::jit::Value*> seen;
                output_quantizers(output, outputs, seen);
            }
            for (::torch::jit::Node* quantize : std::set<::torch::jit::Node*>(outputs))
                add_requantizations(quantize, outputs);
            quantizers.insert(outputs.begin(), outputs.end());
            const std::string path = call_stack_path(op).value_or("");
            for (const std::string& layer : layers) {
                if (!inside(path, layer)) continue;
                layers_[layer].insert(quantizers.begin(), quantizers.end());
                inputs_read_through_ops_[layer].insert(read_through_ops.begin(), read_through_ops.end());
                if (input_on_borrowed_grid) measured_alone_.insert(layer);
            }
        }
        for (const std::string& layer : layers) layers_[layer];  // a layer with nothing found stays float
        make_switches(graph);
    }

    // Quantizes `layer`'s values (true) or lets them pass as they are (false).
    void quantize_layer(const std::string& layer, bool on) {
        for (const std::string& name : switch_names(layer)) module_.setattr(name, on);
    }

    // The module's bool attributes that quantize_layer(layer, ...) sets.
    [[nodiscard]] std::vector<std::string> switch_names(const std::string& layer) const {
        std::vector<std::string> names;
        for (::torch::jit::Node* quantize : layers_.at(layer)) names.push_back(switches_.at(quantize));
        return names;
    }

    // The model as quantized with `kept` in float: a quantize op is off when every layer it
    // belongs to is kept, on otherwise. A value shared by two layers (one's output, the other's
    // input) stays quantized while either is: keeping the first in float leaves the second's
    // input quantized, as the lowered model does. The quantize ops of no analysed layer (ops in
    // the model's own forward) stay on: the real quantization keeps them too. Sets every switch,
    // whatever quantize_layer set before.
    void keep_in_float(const std::vector<std::string>& kept) {
        std::set<::torch::jit::Node*> owned, quantized;
        for (const std::string& layer : kept)
            if (!layers_.contains(layer))
                throw error(error_kind::invalid_argument,
                            "switchable_quantization: '" + layer + "' is no analysed layer");
        for (const auto& [layer, quantizers] : layers_) {
            owned.insert(quantizers.begin(), quantizers.end());
            if (std::find(kept.begin(), kept.end(), layer) == kept.end())
                quantized.insert(quantizers.begin(), quantizers.end());
        }
        for (const auto& [quantize, name] : switches_)
            module_.setattr(name, quantized.contains(quantize) || !owned.contains(quantize));
    }

    // Whether keep_in_float(kept) gives what quantizing with `kept` in float gives: not when a
    // value a kept layer produced stays quantized for a layer that reads it through ops in
    // between (max pooling, flatten, average pooling's requantization). The lowered model then
    // observes it at the reader's input, on a grid of its own, where here it keeps the grid
    // calibrated at the kept layer's output: on the trained Fashion-MNIST CNN, keeping
    // features.0 (conv + relu, then max pooling) and classifier.fc2 in float gave 42.49 dB here
    // and 46.25 dB lowered, the histogram of max-pooled values being another than that of the
    // values pooled.
    [[nodiscard]] bool stands_for_keeping(const std::vector<std::string>& kept) const {
        const auto is_kept = [&](const std::string& layer) {
            return std::find(kept.begin(), kept.end(), layer) != kept.end();
        };
        for (const auto& [reader, quantizers] : inputs_read_through_ops_) {
            if (is_kept(reader)) continue;
            for (const std::string& layer : kept)
                for (::torch::jit::Node* quantize : quantizers)
                    if (layers_.at(layer).contains(quantize)) return false;
        }
        return true;
    }

    // Whether switching `layer` on here gives what quantizing it alone gives: not when its input
    // is on a grid observed elsewhere (fc after average pooling reads the
    // pooling input's grid here, a grid of its own when quantized alone: 37.3 against 39.4 dB on
    // the benchmark's resnet_cnn, enough to reorder the ranking; after max pooling, 2.25 dB on
    // the embedded default's fc1). A ReLU6's output is on the grid of the convolution before it,
    // observed as the ReLU6 sees it: the same grid (requantizes_clamp_as_observed).
    [[nodiscard]] bool stands_for_alone(const std::string& layer) const { return !measured_alone_.contains(layer); }

    // Whether `a` and `b` quantize a value in common (one's output read by the other, directly or
    // through ops that pass quantization through): quantized together, they are not each
    // quantized as alone, the reader's input taking the producer's grid.
    [[nodiscard]] bool share_a_value(const std::string& a, const std::string& b) const {
        const std::set<::torch::jit::Node*>& of_b = layers_.at(b);
        return std::ranges::any_of(layers_.at(a),
                                   [&](::torch::jit::Node* quantize) { return of_b.contains(quantize); });
    }

    const ::torch::jit::Module& module() const { return module_; }

private:
    ::torch::jit::Module module_;
    std::map<std::string, std::set<::torch::jit::Node*>> layers_;
    std::set<std::string> measured_alone_;
    std::map<std::string, std::set<::torch::jit::Node*>> inputs_read_through_ops_;
    std::map<::torch::jit::Node*, std::string> switches_;

    // Each quantize op becomes `if self._quantize_<n>: quantize(x) else: x`, off. A value left
    // as it is then flows into dequantize (which hands a float tensor back unchanged) and into
    // the ops that read qparams from a quantized tensor, which are given the quantize op's own
    // qparams instead.
    void make_switches(const std::shared_ptr<::torch::jit::Graph>& graph) {
        dequantize_lists_item_by_item(graph);
        ::torch::jit::Value* self = graph->inputs()[0];
        const std::vector<::torch::jit::Node*> quantizers = nodes_where(graph, detail::is_quantize);
        for (::torch::jit::Node* quantize : quantizers) {
            if (quantize->kind() == c10::aten::quantize_per_tensor) read_qparams_from_inputs(quantize);
            const std::string name = "_quantize_" + std::to_string(switches_.size());
            module_.register_attribute(name, c10::BoolType::get(), false);
            switches_[quantize] = name;
            const ::torch::jit::WithInsertPoint before(quantize);
            ::torch::jit::Value* on = graph->insertGetAttr(self, name);
            ::torch::jit::Node* choice = graph->insertNode(graph->create(c10::prim::If, {on}, 1));
            choice->output()->setType(quantize->output()->type());
            quantize->output()->replaceAllUsesWith(choice->output());
            ::torch::jit::Block* quantized = choice->addBlock();
            ::torch::jit::Block* unchanged = choice->addBlock();
            quantize->moveBefore(quantized->return_node());
            quantized->registerOutput(quantize->output());
            unchanged->registerOutput(quantize->input(0));
        }
    }

    // dequantize of a list of tensors has no kernel for a list of float tensors (a switched-off
    // quantize op leaves them float): each item is dequantized on its own instead.
    static void dequantize_lists_item_by_item(const std::shared_ptr<::torch::jit::Graph>& graph) {
        const auto lists = nodes_where(graph, [](const ::torch::jit::Node* node) {
            return node->kind() == c10::aten::dequantize && node->input()->node()->kind() == c10::prim::ListConstruct;
        });
        for (::torch::jit::Node* node : lists) {
            const ::torch::jit::WithInsertPoint before(node);
            std::vector<::torch::jit::Value*> items;
            for (::torch::jit::Value* item : node->input()->node()->inputs()) {
                ::torch::jit::Node* dequantize = graph->insertNode(graph->create(c10::aten::dequantize, {item}));
                dequantize->output()->setType(c10::TensorType::get());
                items.push_back(dequantize->output());
            }
            ::torch::jit::Node* list = graph->insertNode(graph->createList(c10::TensorType::get(), items));
            node->output()->replaceAllUsesWith(list->output());
            node->destroy();
        }
    }

    // q_scale / q_zero_point / dtype of what a per-tensor quantize op produced are its scale,
    // zero point and dtype arguments.
    static void read_qparams_from_inputs(::torch::jit::Node* quantize) {
        for (::torch::jit::Node* reader : detail::qparams_readers(quantize)) {
            const std::size_t argument = reader->kind() == c10::aten::q_scale       ? 1
                                         : reader->kind() == c10::aten::q_zero_point ? 2
                                                                                     : 3;
            reader->output()->replaceAllUsesWith(quantize->input(argument));
        }
    }
};

// `layers` in groups whose members share no quantized value (share_a_value in `switches`) and
// may be quantized together (`may_join(a, b)`), greedily, in order. Observers change no value,
// so calibrating a group's layers together observes what calibrating each alone does: one
// quantization per group instead of one per layer.
template <class MayJoin>
std::vector<std::vector<std::string>> groups_apart(const switchable_quantization& switches,
                                                   const std::vector<std::string>& layers, MayJoin may_join) {
    std::vector<std::vector<std::string>> groups;
    for (const std::string& layer : layers) {
        const auto fits = [&](const std::vector<std::string>& group) {
            return std::ranges::none_of(group, [&](const std::string& member) {
                return !may_join(member, layer) || switches.share_a_value(member, layer);
            });
        };
        const auto group = std::ranges::find_if(groups, fits);
        if (group == groups.end())
            groups.push_back({layer});
        else
            group->push_back(layer);
    }
    return groups;
}

// The layers the per-layer analysis reports: the modules inside a target (not the whole model)
// whose own code calls a quantizable op.
inline std::vector<std::string> analysed_layers(const ::torch::jit::Module& model, const runtime_quantizer& quantizer) {
    std::vector<std::string> layers;
    for (const auto& item : model.named_modules())
        if (!item.name.empty() && quantizer.quantizer_for(item.name) &&
            calls_op(item.value, quantizable_op_test(quantizer.is_dynamic())))
            layers.push_back(item.name);
    return layers;
}

// Notes for the targets that hold no layer to quantize: no module under the target's path
// calls a conv or linear op (a linear op, for dynamic targets) that a more specific target does
// not claim. The run goes on, as quantizing part of a model does, and the report says why the
// target changed nothing (a dynamic target on resnet18's layer4, which holds convolutions only).
inline std::vector<adjustment> targets_without_layers(const ::torch::jit::Module& model,
                                                      const runtime_quantizer& quantizer) {
    const std::vector<std::string> layers = analysed_layers(model, quantizer);
    std::vector<adjustment> notes;
    for (const backend_quantizer& q : quantizer.quantizers()) {
        const bool holds_one = std::any_of(layers.begin(), layers.end(), [&](const std::string& layer) {
            return quantizer.quantizer_for(layer)->module_path == q.module_path;
        });
        if (!holds_one)
            notes.push_back({std::string(q.module_path),
                             std::string("this target quantizes nothing: no module under it calls a ") +
                                 (quantizer.is_dynamic() ? "linear op (dynamic targets quantize linear layers only)"
                                                         : "conv or linear op") +
                                 " that a more specific target does not claim"});
    }
    return notes;
}

// Evaluation samples per layer such that the per-layer analysis evaluates about as many samples
// in all as one pass over the `evaluation_samples` (each layer is one pass of its own), but
// never fewer than 128 a layer (or all there are): the analysis then costs about one more
// evaluation pass, whatever the number of layers, up to 1 layer per 128 samples. The whole-model
// figures keep every sample; the report says how many each layer's figure had.
inline std::int64_t per_layer_budget(std::int64_t evaluation_samples, std::size_t layers) {
    constexpr std::int64_t fewest = 128;
    if (layers == 0) return evaluation_samples;
    const std::int64_t share =
        (evaluation_samples + static_cast<std::int64_t>(layers) - 1) / static_cast<std::int64_t>(layers);
    return std::min(evaluation_samples, std::max(fewest, share));
}

// The first `samples` samples of `batches` (all of them for 0), in the same batches.
inline std::vector<batch> first_samples(const std::vector<batch>& batches, std::int64_t samples) {
    if (samples <= 0) return batches;
    std::vector<batch> kept;
    for (const batch& inputs : batches) {
        if (samples <= 0) break;
        kept.push_back(inputs.samples() <= samples ? inputs : inputs.rows(0, samples));
        samples -= inputs.samples();
    }
    return kept;
}

}  // namespace versatil::libtorch
