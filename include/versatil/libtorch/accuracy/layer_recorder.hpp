// One layer recorder for the accuracy steps: a private clone of a model whose inlined forward
// passes the input (GPTQ's H) or the output (bias correction's means) of each conv / linear op
// of chosen layers through a TorchScript method defined on the layers' class types.
#pragma once

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/layer_ops.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"
#include "versatil/libtorch/torchscript/private_clone.hpp"

namespace versatil::libtorch::detail {

// What a recorder records: `source` defines the method `name`, which takes the op's input (before
// the op) or output (after it), keeps what it needs in the layer's attributes and returns it unchanged.
struct record_method {
    enum class side { input, output };
    std::string_view name;
    std::string_view source;
    side records;
};

class layer_recorder {
public:
    // `attributes(module, path, first)` runs on every instance of a recorded layer's class type, recorded or
    // not: a method defined on a type serves all its instances, but each holds its own attributes, which the
    // first of a type registers and the others set. `see(op, layer)` runs on each recorded op as it is found.
    template <class Attributes, class See>
    layer_recorder(const ::torch::jit::Module& model, const std::set<std::string>& layers, const record_method& method,
                   Attributes&& attributes, See&& see)
        : model_(private_clone(model)) {
        std::set<const c10::ClassType*> types;
        for (const std::string& path : layers) {
            const ::torch::jit::Module& layer = layers_.emplace(path, find_submodule(model_, path)).first->second;
            types.insert(layer.type().get());
        }
        std::set<const c10::ClassType*> defined;
        for (const auto& item : model_.named_modules()) {
            if (types.count(item.value.type().get()) == 0) continue;
            ::torch::jit::Module module = item.value;
            const bool first = defined.insert(module.type().get()).second;
            attributes(module, item.name, first);
            if (first) module.define(std::string(method.source));
        }
        const auto graph = ::torch::jit::toGraphFunction(model_.get_method("forward").function()).graph();
        ::torch::jit::Inline(*graph);
        for (const layer_op& found : ops_of_layers(graph, layers)) {
            see(found, layers_.at(found.path));
            const bool input = method.records == record_method::side::input;
            ::torch::jit::Value* recorded = input ? found.op->input(0) : found.op->output();
            ::torch::jit::Node* record = graph->create(c10::prim::CallMethod, {found.layer, recorded});
            record->s_(c10::attr::name, std::string(method.name));
            record->output()->setType(recorded->type());
            if (input) {
                record->insertBefore(found.op);
                found.op->replaceInput(0, record->output());
            } else {
                record->insertAfter(found.op);
                recorded->replaceAllUsesAfterNodeWith(record, record->output());
            }
        }
    }

    void forward(const batch& inputs) { model_.forward(inputs.arguments()); }

    // A recorded layer of the clone, whose attributes hold what its method recorded.
    ::torch::jit::Module layer(const std::string& path) const { return layers_.at(path); }
    const std::map<std::string, ::torch::jit::Module>& layers() const { return layers_; }

private:
    ::torch::jit::Module model_;
    std::map<std::string, ::torch::jit::Module> layers_;
};

}  // namespace versatil::libtorch::detail
