// A method's graph (or a copy of one) run on its module as a function of its own, for what runs
// a model once or a few times while quantizing: the check that the engine runs the lowered model,
// the recording of what its linear layers read. The module's own methods are not run, so the
// executor its later runs use is left as it was, and the runs here go without the graph
// executor's optimizations: they would cost more than a few runs gain, and a process's first
// optimized run costs some 40 ms of LibTorch's own set-up (docs/benchmarks.md).
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <memory>
#include <string>
#include <utility>

#include "versatil/libtorch/torchscript/batch.hpp"

namespace versatil::libtorch {

class graph_on_module {
public:
    // `graph`'s first input is the module, as a method's is.
    graph_on_module(::torch::jit::Module module, std::shared_ptr<::torch::jit::Graph> graph, std::string name)
        : module_(std::move(module)), function_(std::move(name), std::move(graph), nullptr) {}

    // The graph's output on one batch.
    c10::IValue operator()(const batch& inputs) {
        const ::torch::jit::GraphOptimizerEnabledGuard unoptimized(false);  // the setting is the thread's own
        ::torch::jit::Stack stack{module_._ivalue()};
        for (const c10::IValue& argument : inputs.arguments()) stack.push_back(argument);
        function_.run(stack);
        return stack.front();
    }

private:
    ::torch::jit::Module module_;
    ::torch::jit::GraphFunction function_;
};

}  // namespace versatil::libtorch
