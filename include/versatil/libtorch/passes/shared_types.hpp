// Submodules that share a TorchScript class type get types of their own where the QConfigs
// below them differ.
//
// Scripting gives every instance of one Python class with the same attribute types one class
// type: the repeated blocks of every transformer encoder or ResNet stage share theirs.
// LibTorch 1.13's InsertObservers clones types per (type, the module's own QConfig), so two
// blocks with the same QConfig get one cloned type, fixed by the first block's children; when
// a child of the second block has another QConfig (a target names one block, or per-layer
// analysis quantizes one layer of it), InsertObservers stops with "Linear is not compatible
// with the type Linear for the field '0'". Python's graph mode has the same limit.
//
// Where instances of a type differ in the QConfigs of their subtrees, each such instance is
// replaced by a clone with types of its own (Module::clone keeps sharing only inside the
// clone), and its parent's graphs are retyped to match. Parents are split before children,
// so the parent edited is always the only instance of its type. Call it on a clone.
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_observers.h>
#include <torch/script.h>

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

namespace detail {

class qconfig_survey {
public:
    qconfig_survey(const ::torch::jit::Module& model, const ::torch::jit::QConfigDict& dict) : dict_(dict) {
        signature(model, "", c10::nullopt);
    }

    // Instances of `type` differ in the QConfigs below them.
    bool is_ambiguous(const c10::ClassType* type) const { return signatures_.at(type).size() > 1; }
    bool is_unique(const c10::ClassType* type) const { return instances_.at(type) == 1; }

private:
    // The QConfigs of a submodule and of everything below it as InsertObservers assigns them
    // (a path's own entry, else its parent's), written out as a string.
    std::string signature(const ::torch::jit::Module& module, const std::string& path,
                          const c10::optional<::torch::jit::QConfig>& inherited) {
        const auto entry = dict_.find(path);
        const c10::optional<::torch::jit::QConfig>& own = entry != dict_.end() ? entry->second : inherited;
        std::string text = std::to_string(id_of(own)) + "(";
        for (const auto& child : module.named_children())
            text += child.name + ":" +
                    signature(child.value, path.empty() ? child.name : path + "." + child.name, own) + ",";
        text += ")";
        const c10::ClassType* type = module.type().get();
        signatures_[type].insert(text);
        ++instances_[type];
        return text;
    }

    // QConfigs are told apart by their observer objects, as LibTorch does.
    int id_of(const c10::optional<::torch::jit::QConfig>& qconfig) {
        if (!qconfig) return 0;
        const std::pair<const void*, const void*> key{std::get<0>(*qconfig)._ivalue().get(),
                                                      std::get<1>(*qconfig)._ivalue().get()};
        return ids_.emplace(key, static_cast<int>(ids_.size()) + 1).first->second;
    }

    const ::torch::jit::QConfigDict& dict_;
    std::map<std::pair<const void*, const void*>, int> ids_;
    std::unordered_map<const c10::ClassType*, std::set<std::string>> signatures_;
    std::unordered_map<const c10::ClassType*, int> instances_;
};

// Replaces `parent`'s child `name` by a clone with types of its own; `parent` must be the only
// instance of its type, whose graphs are then retyped.
inline void give_own_type(::torch::jit::Module& parent, const std::string& name, const ::torch::jit::Module& child) {
    const ::torch::jit::Module fresh = child.clone();
    parent._ivalue()->setAttr(name, fresh._ivalue());
    parent.type()->unsafeChangeAttributeType(name, fresh.type());
    for (const auto& graph : method_graphs(parent.type()))
        for (::torch::jit::Node* read : self_attribute_reads(graph))
            if (read->s(c10::attr::name) == name) read->output()->setType(fresh.type());
}

// Splits the first child (parents first) whose type is ambiguous under a parent of a type of
// its own; false when there is none left.
inline bool split_first_ambiguous(::torch::jit::Module& module, const qconfig_survey& survey) {
    for (const auto& child : module.named_children()) {
        if (survey.is_ambiguous(child.value.type().get())) {
            give_own_type(module, child.name, child.value);
            return true;
        }
    }
    for (const auto& child : module.named_children()) {
        ::torch::jit::Module next = child.value;
        if (survey.is_unique(next.type().get()) && split_first_ambiguous(next, survey)) return true;
    }
    return false;
}

}  // namespace detail

// Returns how many submodules got types of their own.
inline int split_shared_types(::torch::jit::Module& model, const ::torch::jit::QConfigDict& dict) {
    int splits = 0;
    while (detail::split_first_ambiguous(model, detail::qconfig_survey(model, dict))) ++splits;
    return splits;
}

}  // namespace versatil::libtorch
