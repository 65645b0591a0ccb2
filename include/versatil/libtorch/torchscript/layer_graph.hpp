// The weighted layers of a model as its forward runs them, and the links between them that
// cross-layer equalization rescales: a conv or linear layer whose output feeds one other layer
// of the same kind and nothing else, directly or through ops that commute with a positive
// per-channel scale (relu, pooling, dropout). Found in a copy of the
// forward graph with every call inlined except calls into the layers and activation modules
// themselves, so links across module boundaries (a block's last conv into the next block's
// first) are found, and each layer is known by its module path.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

// A module's class name without TorchScript's `___torch_mangle_N.` parts:
// "__torch__.torch.nn.modules.conv.Conv2d".
inline std::string plain_class_name(const ::torch::jit::Module& module) {
    if (!module.type()->name()) return {};
    static const std::regex mangle(R"(___torch_mangle_\d+\.)");
    return std::regex_replace(module.type()->name()->qualifiedName(), mangle, "");
}

// The op a weighted layer computes with: a convolution or a linear map.
enum class weighted_op { conv, linear };

// A conv or linear module, as quantization sees one: no children, a floating `weight`
// parameter ([out, in / groups, kernel...] or [out, in]), a `bias` that is a tensor or None, and
// conv or linear ops (of one kind) in its own methods.
inline std::optional<weighted_op> weighted_op_of(const ::torch::jit::Module& module) {
    if (module.named_children().size() != 0 || !module.hasattr("weight") || !module.hasattr("bias"))
        return std::nullopt;
    const c10::IValue weight = module.attr("weight"), bias = module.attr("bias");
    if (!weight.isTensor() || !at::isFloatingType(weight.toTensor().scalar_type()) || weight.toTensor().dim() < 2 ||
        !(bias.isTensor() || bias.isNone()))
        return std::nullopt;
    const bool conv =
        calls_op(module, [](std::string_view kind) { return is_quantizable_op(kind) && !is_linear_op(kind); });
    const bool linear = calls_op(module, is_linear_op);
    if (conv == linear) return std::nullopt;
    return conv ? weighted_op::conv : weighted_op::linear;
}

// What lies between two layers. relu is positive-homogeneous (relu(s x) = s relu(x) for s > 0),
// and max / average pooling and dropout are too, channel by channel, so a per-channel scale passes
// through them exactly; relu6 and hardtanh clip at a fixed value, so it does not. Ordered: a path
// is what its strongest part is.
enum class activation_kind { none, relu, clipping };

namespace detail {
inline bool is_one_of(std::string_view name, std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace detail

// A module between layers, by its torch.nn class; nullopt for anything else.
inline std::optional<activation_kind> connector_module(const ::torch::jit::Module& module) {
    const std::string name = plain_class_name(module);
    const std::string_view prefix = "__torch__.torch.nn.modules.";
    if (!name.starts_with(prefix)) return std::nullopt;
    const std::string_view kind = std::string_view(name).substr(prefix.size());
    if (kind == "activation.ReLU") return activation_kind::relu;
    if (kind == "activation.ReLU6" || kind == "activation.Hardtanh") return activation_kind::clipping;
    if (detail::is_one_of(kind, {"pooling.MaxPool1d", "pooling.MaxPool2d", "pooling.MaxPool3d", "pooling.AvgPool1d",
                                 "pooling.AvgPool2d", "pooling.AvgPool3d", "pooling.AdaptiveAvgPool1d",
                                 "pooling.AdaptiveAvgPool2d", "pooling.AdaptiveAvgPool3d", "dropout.Dropout",
                                 "dropout.Dropout1d", "dropout.Dropout2d", "dropout.Dropout3d", "linear.Identity"}))
        return activation_kind::none;
    return std::nullopt;
}

// An op between layers (its input 0 the value passed on, one output); nullopt for anything else.
inline std::optional<activation_kind> connector_op(std::string_view kind) {
    if (kind == "aten::relu" || kind == "aten::relu_") return activation_kind::relu;
    if (detail::is_one_of(kind, {"aten::relu6", "aten::relu6_", "aten::hardtanh", "aten::hardtanh_"}))
        return activation_kind::clipping;
    if (detail::is_one_of(kind, {"aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::avg_pool1d",
                                 "aten::avg_pool2d", "aten::avg_pool3d", "aten::adaptive_avg_pool1d",
                                 "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d", "aten::dropout",
                                 "aten::dropout_", "aten::feature_dropout", "aten::feature_dropout_"}))
        return activation_kind::none;
    return std::nullopt;
}

struct weighted_layer {
    std::string path;
    weighted_op kind = weighted_op::conv;
    int call_sites = 0;  // CallMethod nodes on it in the inlined forward
};

// `producer` feeds `consumer` and nothing else, through connectors (`activation`: the strongest).
struct layer_link {
    std::string producer;
    std::string consumer;
    activation_kind activation = activation_kind::none;
};

struct layer_graph {
    std::vector<weighted_layer> layers;  // in the order the forward graph calls them first
    std::vector<layer_link> links;       // both layers called once, of one kind
};

namespace detail {

// Inlines calls to free functions and to methods of modules for which keep(module type) is false.
template <class Keep>
void inline_calls_except(const std::shared_ptr<::torch::jit::Graph>& graph, Keep&& keep) {
    for (;;) {
        const auto calls = nodes_where(graph, [&](::torch::jit::Node* node) {
            if (node->kind() == c10::prim::CallFunction)
                return node->input(0)->node()->kind() == c10::prim::Constant && ::torch::jit::tryToGraphFunction(node);
            if (node->kind() != c10::prim::CallMethod) return false;
            const c10::ClassTypePtr type = node->input(0)->type()->cast<c10::ClassType>();
            return type && !keep(type) && ::torch::jit::tryToGraphFunction(node) != nullptr;
        });
        if (calls.empty()) return;
        for (::torch::jit::Node* call : calls) {
            ::torch::jit::GraphFunction* callee = ::torch::jit::tryToGraphFunction(call);
            if (call->kind() == c10::prim::CallFunction) call->removeInput(0);
            ::torch::jit::inlineCallTo(call, callee, callee->graph().get());
        }
    }
}

}  // namespace detail

// The layers and links of `model`'s forward. `model` is only read.
inline layer_graph find_layer_graph(const ::torch::jit::Module& model) {
    std::map<const c10::ClassType*, ::torch::jit::Module> example;  // a module of each type, to classify it
    std::map<std::string, ::torch::jit::Module> by_path;
    for (const auto& item : model.named_modules()) {
        example.emplace(item.value.type().get(), item.value);
        by_path.emplace(item.name, item.value);
    }
    // Layers and connector modules stay calls; their types are classified once.
    std::map<const c10::ClassType*, bool> is_leaf;
    const auto keep = [&](const c10::ClassTypePtr& type) {
        const auto found = is_leaf.find(type.get());
        if (found != is_leaf.end()) return found->second;
        const auto module = example.find(type.get());
        const bool leaf = module != example.end() &&
                          (weighted_op_of(module->second).has_value() || connector_module(module->second).has_value());
        return is_leaf.emplace(type.get(), leaf).first->second;
    };
    const std::shared_ptr<::torch::jit::Graph> graph = model.get_method("forward").graph()->copy();
    detail::inline_calls_except(graph, keep);

    const std::map<const ::torch::jit::Value*, std::string> path_of = module_value_paths(graph);
    const auto module_at =
        [&](const ::torch::jit::Value* value) -> std::optional<std::pair<std::string, ::torch::jit::Module>> {
        const auto path = path_of.find(value);
        if (path == path_of.end()) return std::nullopt;
        const auto module = by_path.find(path->second);
        if (module == by_path.end()) return std::nullopt;
        return *module;
    };

    layer_graph result;
    std::map<std::string, std::size_t> index;
    std::map<const ::torch::jit::Node*, std::size_t> layer_call;  // forward calls on a layer
    for_each_node(graph->block(), [&](const ::torch::jit::Node* node) {
        if (node->kind() != c10::prim::CallMethod) return;
        const auto module = module_at(node->input(0));
        if (!module) return;
        const std::optional<weighted_op> kind = weighted_op_of(module->second);
        if (!kind) return;
        auto [entry, added] = index.emplace(module->first, result.layers.size());
        if (added) result.layers.push_back({module->first, *kind, 0});
        ++result.layers[entry->second].call_sites;
        if (node->s(c10::attr::name) == "forward" && node->inputs().size() == 2)
            layer_call.emplace(node, entry->second);
    });

    // The one use of a value, if it has exactly one.
    const auto only_user = [](const ::torch::jit::Value* value) -> const ::torch::jit::Node* {
        return value->uses().size() == 1 ? value->uses()[0].user : nullptr;
    };
    const auto consumer_of = [&](const ::torch::jit::Node* user) -> std::optional<std::size_t> {
        const auto found = layer_call.find(user);
        return found == layer_call.end() ? std::nullopt : std::optional{found->second};
    };
    // What `user` is between two layers, if it passes `value` on.
    const auto connector = [&](const ::torch::jit::Node* user,
                               const ::torch::jit::Value* value) -> std::optional<activation_kind> {
        if (user->outputs().size() != 1) return std::nullopt;
        if (user->kind() == c10::prim::CallMethod) {
            const auto module = module_at(user->input(0));
            if (!module || user->inputs().size() != 2 || user->s(c10::attr::name) != "forward") return std::nullopt;
            return connector_module(module->second);
        }
        if (user->inputs().empty() || user->input(0) != value) return std::nullopt;
        return connector_op(user->kind().toQualString());
    };
    for (const auto& [call, producer] : layer_call) {
        const ::torch::jit::Value* value = call->output();
        activation_kind activation = activation_kind::none;
        std::optional<std::size_t> consumer;
        for (const ::torch::jit::Node* user = only_user(value); user && !consumer; user = only_user(value)) {
            if ((consumer = consumer_of(user))) break;
            const std::optional<activation_kind> between = connector(user, value);
            if (!between) break;
            activation = std::max(activation, *between);
            value = user->output();
        }
        if (!consumer) continue;
        const weighted_layer &from = result.layers[producer], &to = result.layers[*consumer];
        if (from.kind != to.kind || from.call_sites != 1 || to.call_sites != 1) continue;
        result.links.push_back({from.path, to.path, activation});
    }
    // In the order the producers run.
    std::sort(result.links.begin(), result.links.end(),
              [&](const layer_link& a, const layer_link& b) { return index.at(a.producer) < index.at(b.producer); });
    return result;
}

}  // namespace versatil::libtorch
