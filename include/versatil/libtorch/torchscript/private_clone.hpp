// A clone of a TorchScript module whose class types live in a compilation unit of its own.
//
// LibTorch's Module::clone registers the clone's new class types and their methods in the
// compilation unit of the module it clones, and so do the passes that clone on the way
// (FoldConvBatchNorm, freezing in Finalize). A compilation unit never drops a type or a
// function, and it lives as long as any module of its own does: quantizing the caller's model
// the plain way left five graphs per run in the model's unit (the clone, the folded and observed
// models, the converted one, and the frozen lowered one with its packed weights as constants),
// for as long as the caller kept the model. Measured on mobilenet_cnn, 300 quantizations in one
// process: resident memory grew by 2.7 MB a run and each quantization slowed from 59 to 83 ms.
//
// Cloned from a copy of the object tree that names a fresh unit, everything the pipeline builds
// lands there, and is freed with the last module that uses it: the intermediate models when
// quantize() returns, the lowered model when the caller drops it. The caller's types are only
// read (Module::clone creates new ones), so the caller's model stays as it was.
#pragma once

#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/script.h>

#include <memory>
#include <unordered_map>

#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

namespace detail {

using object_ptr = c10::intrusive_ptr<c10::ivalue::Object>;

// `object` and its submodules as new objects of the same types and slots naming `unit`; a
// submodule reached twice is copied once, so the clone shares it as the original does.
inline object_ptr rehome(const object_ptr& object, const std::shared_ptr<::torch::jit::CompilationUnit>& unit,
                         std::unordered_map<const c10::ivalue::Object*, object_ptr>& copies) {
    if (const auto done = copies.find(object.get()); done != copies.end()) return done->second;
    const std::size_t slots = object->slots().size();
    object_ptr copy = c10::ivalue::Object::create(c10::StrongTypePtr(unit, object->type()), slots);
    copies.emplace(object.get(), copy);
    for (std::size_t i = 0; i < slots; ++i) {
        const c10::IValue& slot = object->getSlot(i);
        const bool submodule = slot.isObject() && slot.toObjectRef().type()->is_module();
        copy->setSlot(i, submodule ? c10::IValue(rehome(slot.toObject(), unit, copies)) : slot);
    }
    return copy;
}

}  // namespace detail

// `module`'s objects (shallow copies: same types, same attribute values) naming a compilation
// unit of their own, where what clones them later registers its types. Observers take this
// form: made from prototypes compiled once per process, their clones (Finalize freezes a clone
// of the converted model, with whatever observers it keeps) would otherwise pile up in the
// prototypes' unit for as long as the process runs.
inline ::torch::jit::Module in_own_unit(const ::torch::jit::Module& module) {
    std::unordered_map<const c10::ivalue::Object*, detail::object_ptr> copies;
    return ::torch::jit::Module(
        detail::rehome(module._ivalue(), std::make_shared<::torch::jit::CompilationUnit>(), copies));
}

// What Module::clone gives (new types, the data copied), in a compilation unit of its own, with
// the convolutions of a traced model (aten::_convolution, all arguments spelled out) written as
// a scripted one's (aten::conv2d, ...), so that counting, layer finding and the accuracy steps
// see one form. LibTorch's quantization makes the same rewrite when it inserts observers. Only
// on graphs holding aten::_convolution: the rewrite parses its dozen IR patterns anew on every
// call, and calling it on every method of every submodule was most of prepare's cold time.
inline ::torch::jit::Module private_clone(const ::torch::jit::Module& module) {
    ::torch::jit::Module clone = in_own_unit(module).clone();
    for (const ::torch::jit::Module& submodule : clone.modules())
        for (const ::torch::jit::Method& method : submodule.get_methods()) {
            std::shared_ptr<::torch::jit::Graph> graph = method.graph();
            if (has_node_of_kind(graph, {c10::aten::_convolution}))
                ::torch::jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
        }
    return clone;
}

}  // namespace versatil::libtorch
