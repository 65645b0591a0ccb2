// Per-layer sensitivity of dynamic targets from one quantization: the direct path's frozen
// model (dynamic.hpp) with every targeted linear op behind a switch, quantized::linear_dynamic
// on its packed weight when on, the float op it replaces when off. Each layer's switches are
// turned on in turn: one evaluation pass per layer, where the analysis used to quantize the
// model once per layer (a clone, a freeze and a weight packing each: 14 of them made the
// per-layer analysis more than the rest of a transformer's quantize run).
//
// With one layer on, the model computes what the direct path makes of that layer quantized
// alone: the same frozen graph, the same packed weights, the other linear ops in float. Where a
// layer's input is read by a linear op outside it too (q_proj beside k_proj and v_proj), graph
// mode quantizing the layer alone would also quantize that input for the others (LibTorch 1.13
// keeps the quantize / dequantize pair before every dynamically quantizable op, targeted or
// not), and on QNNPACK it fails on that pair (an int8 tensor given uint8's zero point). Here the
// others read it in float: the figure is that of the layer's own quantization.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/stages/dynamic.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/analysis/sensitivity.hpp"

namespace versatil::libtorch {

class switchable_dynamic_quantization {
public:
    // None when the direct path does not cover the model, or when a target has the cle option:
    // equalizing the whole target's chains is another model than equalizing one layer's.
    static std::optional<switchable_dynamic_quantization> make(const ::torch::jit::Module& model,
                                                                const quantization_plan& plan,
                                                                const std::vector<std::string>& layers,
                                                                const std::vector<batch>& choose_on = {}) {
        if (plan.quant_type != ::torch::jit::QuantType::DYNAMIC || plan.quantizer.is_qat()) return std::nullopt;
        for (const backend_quantizer& target : plan.quantizer.quantizers())
            if (target.config().cross_layer_equalization) return std::nullopt;
        const auto environment = plan.quantizer.environment_context();
        const engine_scope engine(plan.engine);  // weights are packed for the engine that runs them
        auto frozen = detail::freeze_for_direct_path(model, plan, choose_on);
        if (!frozen) return std::nullopt;
        switchable_dynamic_quantization switches(std::move(frozen->module), plan.engine);
        try {
            switches.make_switches(frozen->linears, layers);
        } catch (const std::exception& failure) {
            throw detail::lowering_failure(plan, failure);
        }
        return switches;
    }

    // Quantizes `layer`'s linear ops (true) or runs them in float (false).
    void quantize_layer(const std::string& layer, bool on) {
        for (const std::string& name : switch_names(layer)) module_.setattr(name, on);
    }

    // The module's bool attributes that quantize_layer(layer, ...) sets.
    [[nodiscard]] std::vector<std::string> switch_names(const std::string& layer) const {
        check_analysed(layer);
        std::vector<std::string> names;
        for (const linear_switch& linear : switches_)
            if (detail::inside(linear.path, layer)) names.push_back(linear.name);
        return names;
    }

    // The model as quantized with `kept` in float (the accuracy target's greedy search): every
    // targeted linear op quantized but those of the kept layers. Sets every switch, whatever
    // quantize_layer set before.
    void keep_in_float(const std::vector<std::string>& kept) {
        for (const std::string& layer : kept) check_analysed(layer);
        for (const linear_switch& linear : switches_) module_.setattr(linear.name, !in_float(linear, kept));
    }

    // Whether keep_in_float(kept) gives what quantizing with `kept` in float gives. Each op is
    // quantized on its own packed weight and its input's range at run time, so which others are
    // quantized changes nothing of it, but for one case: a kept linear op that reads the input of
    // a quantized one (q_proj kept, k_proj and v_proj not). The direct path then gives way to
    // graph mode, which quantizes that shared input for the kept op too (dynamic.hpp), and on
    // QNNPACK cannot run the result at all.
    [[nodiscard]] bool stands_for_keeping(const std::vector<std::string>& kept) const {
        for (const linear_switch& linear : switches_)
            if (in_float(linear, kept))
                for (const linear_switch& other : switches_)
                    if (other.input == linear.input && !in_float(other, kept)) return false;
        return true;
    }

    const ::torch::jit::Module& module() const { return module_; }
    at::QEngine engine() const { return engine_; }

private:
    struct linear_switch {
        std::string name;                   // the module's bool attribute
        std::string path;                   // the module whose code calls the op
        const ::torch::jit::Value* input;   // what it reads, shared by q, k and v projections
    };

    ::torch::jit::Module module_;
    at::QEngine engine_;
    std::set<std::string, std::less<>> layers_;  // the analysed layers
    std::vector<linear_switch> switches_;

    static bool in_float(const linear_switch& linear, const std::vector<std::string>& kept) {
        return std::ranges::any_of(kept, [&](const std::string& layer) { return detail::inside(linear.path, layer); });
    }

    void check_analysed(const std::string& layer) const {
        if (!layers_.contains(layer))
            throw error(error_kind::invalid_argument,
                        "switchable_dynamic_quantization: '" + layer + "' is no analysed layer");
    }

    switchable_dynamic_quantization(::torch::jit::Module module, at::QEngine engine)
        : module_(std::move(module)), engine_(engine) {}

    // Each targeted linear becomes `if self._quantize_<n>: linear_dynamic(x, packed) else: linear(x, w, b)`,
    // off, its weight packed before the choice so that prepack folding packs it once.
    void make_switches(const std::vector<detail::targeted_linear>& linears, const std::vector<std::string>& layers) {
        const std::shared_ptr<::torch::jit::Graph> graph = module_.get_method("forward").graph();
        ::torch::jit::Value* self = graph->inputs()[0];
        layers_.insert(layers.begin(), layers.end());  // a layer with no targeted linear stays float
        for (const detail::targeted_linear& linear : linears) {
            ::torch::jit::Node* node = linear.node;
            const std::string name = "_quantize_" + std::to_string(switches_.size());
            module_.register_attribute(name, c10::BoolType::get(), false);
            switches_.push_back({name, call_stack_path(node).value_or(""), node->input(0)});
            const ::torch::jit::WithInsertPoint before(node);
            ::torch::jit::Value* packed = detail::insert_packed_weight(*graph, linear);
            ::torch::jit::Node* choice =
                graph->insertNode(graph->create(c10::prim::If, {graph->insertGetAttr(self, name)}, 1));
            choice->output()->setType(node->output()->type());
            node->output()->replaceAllUsesWith(choice->output());
            ::torch::jit::Block* quantized = choice->addBlock();
            ::torch::jit::Block* in_float = choice->addBlock();
            {
                const ::torch::jit::WithInsertPoint inside_block(quantized->return_node());
                quantized->registerOutput(detail::insert_linear_dynamic(*graph, linear, node->input(0), packed));
            }
            node->moveBefore(in_float->return_node());
            in_float->registerOutput(node->output());
        }
        ::torch::jit::FoldQuantizedPrepackingOps(module_);
    }
};

}  // namespace versatil::libtorch
