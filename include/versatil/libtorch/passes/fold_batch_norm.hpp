// Batch norm folded into the layer before it, on an eval-mode model, before observers: LibTorch's
// FoldConvBatchNorm for convolutions, and the same fold for a torch.nn.Linear whose only reader is
// a torch.nn.BatchNorm1d (an MLP block, the MLPerf Tiny anomaly-detection autoencoder), which
// LibTorch 1.13's graph mode leaves as a quantized::batch_norm after the linear layer: one
// requantization more on the host, and an op the firmware runtime has no kernel for.
//
// The fold is the convolution's, per output feature o: s = gamma[o] / sqrt(var[o] + eps),
// W'[o,:] = s W[o,:], b'[o] = s (b[o] - mean[o]) + beta[o] (gamma 1 and beta 0 without affine).
#pragma once

#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/script.h>

#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/torchscript/module_tree.hpp"

namespace versatil::libtorch {

namespace detail {

// Whether LibTorch's FoldConvBatchNorm can change `model`: it folds batch norms into torch.nn
// convolutions and gives those without a bias a None one (LibTorch 1.13, fold_conv_bn.cpp), on
// a copy of its own. A model without a torch.nn convolution (an MLP, a transformer) would only
// pay for that copy of every weight: on this machine ~3 ms for an MLP's 1.3 MB, most of it
// page faults on the fresh memory.
inline bool has_torch_nn_convolution(const ::torch::jit::Module& model) {
    for (const auto& item : model.named_modules())
        if (class_name_contains(item.value, "torch.nn.modules.conv.")) return true;
    return false;
}

// Whether `type` is the torch.nn class `module_path`.`name` (TorchScript mangles the names of
// types scripted twice: `__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear`).
inline bool is_torch_nn_class(const c10::TypePtr& type, std::string_view module_path, std::string_view name) {
    const auto class_type = type->cast<c10::ClassType>();
    if (!class_type || !class_type->name()) return false;
    const std::string qualified = class_type->name()->qualifiedName();
    const std::string prefix = "__torch__.torch.nn.modules." + std::string(module_path) + ".";
    return qualified.starts_with(prefix) && qualified.ends_with("." + std::string(name));
}

// `%child = prim::GetAttr[name=...](%self)` of `graph`'s own module: the child's name, or empty.
inline std::string direct_child_name(const ::torch::jit::Graph& graph, const ::torch::jit::Value* module_value) {
    const ::torch::jit::Node* get = module_value->node();
    if (get->kind() != c10::prim::GetAttr || get->input() != graph.inputs().at(0)) return "";
    return get->s(c10::attr::name);
}

// A `bn(linear(x))` site in a method graph: the two calls and the children's attribute names.
struct linear_batch_norm_site {
    ::torch::jit::Node* linear_call;
    ::torch::jit::Node* batch_norm_call;
    std::string linear;
    std::string batch_norm;
};

inline std::vector<linear_batch_norm_site> linear_batch_norm_sites(::torch::jit::Graph& graph) {
    std::vector<linear_batch_norm_site> sites;
    for (::torch::jit::Node* node : graph.nodes()) {  // the top-level block: a call inside a branch stays
        if (node->kind() != c10::prim::CallMethod || node->s(c10::attr::name) != "forward" ||
            node->inputs().size() != 2)
            continue;
        if (!is_torch_nn_class(node->input(0)->type(), "batchnorm", "BatchNorm1d")) continue;
        ::torch::jit::Node* producer = node->input(1)->node();
        if (producer->kind() != c10::prim::CallMethod || producer->s(c10::attr::name) != "forward" ||
            producer->inputs().size() != 2 || !is_torch_nn_class(producer->input(0)->type(), "linear", "Linear"))
            continue;
        // The unnormalized output must have no other reader, or the fold would change what it reads.
        if (producer->output()->uses().size() != 1) continue;
        const std::string linear = direct_child_name(graph, producer->input(0));
        const std::string batch_norm = direct_child_name(graph, node->input(0));
        if (linear.empty() || batch_norm.empty()) continue;
        sites.push_back({producer, node, linear, batch_norm});
    }
    return sites;
}

// Whether `batch_norm` normalizes with running statistics in eval mode (track_running_stats).
inline bool has_running_statistics(const ::torch::jit::Module& batch_norm) {
    return batch_norm.hasattr("running_mean") && batch_norm.attr("running_mean").isTensor() &&
           batch_norm.hasattr("running_var") && batch_norm.attr("running_var").isTensor();
}

// A torch.nn.Linear without a bias has a NoneType `bias` parameter; the fold needs a tensor
// there, so the class's `bias` becomes an Optional[Tensor] parameter (None stays a valid value for
// the other modules of the class) and its methods read it as such. LibTorch changes the type of
// a regular attribute only, so the parameter is removed and added again: every object of the
// class (`modules`, all of them: the types are the caller's clone's own) drops its old slot and
// gets None in the new one, the last. GetAttr nodes name the attribute, so the graphs stay valid.
inline void make_bias_optional(const c10::ClassTypePtr& type, const std::vector<::torch::jit::Module>& modules) {
    if (!type->getAttribute("bias")->cast<c10::NoneType>()) return;
    const std::size_t old_slot = type->getAttributeSlot("bias");
    const c10::TypePtr optional_tensor = c10::OptionalType::create(c10::TensorType::get());
    type->unsafeRemoveAttribute("bias");
    const std::size_t new_slot = type->addAttribute("bias", optional_tensor, /*is_parameter=*/true);
    for (const ::torch::jit::Module& module : modules) {
        if (module.type() != type) continue;
        module._ivalue()->unsafeRemoveSlot(old_slot);
        module._ivalue()->setSlot(new_slot, c10::IValue());
    }
    for (::torch::jit::Function* method : type->methods())
        for (::torch::jit::Node* node : ::torch::jit::toGraphFunction(*method).graph()->nodes())
            if (node->kind() == c10::prim::GetAttr && node->s(c10::attr::name) == "bias")
                node->output()->setType(optional_tensor);
}

inline void fold_into_linear(::torch::jit::Module linear, const ::torch::jit::Module& batch_norm) {
    const ::torch::NoGradGuard no_grad;
    const at::Tensor weight = linear.attr("weight").toTensor();
    const at::Tensor mean = batch_norm.attr("running_mean").toTensor().to(weight.scalar_type());
    const at::Tensor variance = batch_norm.attr("running_var").toTensor().to(weight.scalar_type());
    const double eps = batch_norm.attr("eps").toDouble();
    const c10::IValue gamma = batch_norm.attr("weight");
    const c10::IValue beta = batch_norm.attr("bias");
    at::Tensor scale = at::rsqrt(variance + eps);
    if (gamma.isTensor()) scale = scale * gamma.toTensor();
    const c10::IValue old_bias = linear.attr("bias");
    at::Tensor bias = old_bias.isTensor() ? old_bias.toTensor() - mean : -mean;
    bias = bias * scale;
    if (beta.isTensor()) bias = bias + beta.toTensor();
    linear.setattr("weight", (weight * scale.unsqueeze(1)).detach());
    linear.setattr("bias", bias.detach());
}

}  // namespace detail

// Folds every `bn(linear(x))` of `model`'s method graphs (torch.nn.Linear, torch.nn.BatchNorm1d
// with running statistics, both children of the module whose method calls them) into the linear
// layer, in place: pass a clone in eval mode (Module::clone gives it class types of its own).
// Graphs belong to class types, which modules of one class share, so a site is folded in every
// module of the class or, when one of them cannot be folded, in none. The batch norm stays a child,
// no longer called. Returns the sites folded.
inline int fold_linear_batch_norm(::torch::jit::Module& model) {
    std::vector<::torch::jit::Module> modules;
    for (const auto& item : model.named_modules()) modules.push_back(item.value);
    std::unordered_set<const c10::ClassType*> seen;
    int folded = 0;
    for (const ::torch::jit::Module& module : modules) {
        if (!seen.insert(module.type().get()).second) continue;
        std::vector<::torch::jit::Module> same_class;
        for (const ::torch::jit::Module& other : modules)
            if (other.type() == module.type()) same_class.push_back(other);
        for (::torch::jit::Function* method : module.type()->methods()) {
            const std::shared_ptr<::torch::jit::Graph> graph = ::torch::jit::toGraphFunction(*method).graph();
            bool changed = false;
            for (const detail::linear_batch_norm_site& site : detail::linear_batch_norm_sites(*graph)) {
                bool foldable = true;
                for (const ::torch::jit::Module& owner : same_class)
                    foldable = foldable && detail::has_running_statistics(owner.attr(site.batch_norm).toModule());
                if (!foldable) continue;
                detail::make_bias_optional(same_class.front().attr(site.linear).toModule().type(), modules);
                for (const ::torch::jit::Module& owner : same_class)
                    detail::fold_into_linear(owner.attr(site.linear).toModule(),
                                             owner.attr(site.batch_norm).toModule());
                site.batch_norm_call->output()->replaceAllUsesWith(site.linear_call->output());
                site.batch_norm_call->destroy();
                changed = true;
                ++folded;
            }
            if (changed) ::torch::jit::EliminateDeadCode(graph);
        }
    }
    return folded;
}

// Batch norm folded into the convolutions and linear layers before it (see above). `clone` is
// the caller's own eval-mode copy: the linear fold edits it.
inline ::torch::jit::Module fold_batch_norms(::torch::jit::Module clone) {
    ::torch::jit::Module folded =
        detail::has_torch_nn_convolution(clone) ? ::torch::jit::FoldConvBatchNorm(clone) : clone;
    fold_linear_batch_norm(folded);
    return folded;
}

}  // namespace versatil::libtorch
