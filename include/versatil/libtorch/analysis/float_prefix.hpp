// The per-layer analysis' rows without running the float part of the model once per row. A row
// runs the switched model (sensitivity.hpp, dynamic_switches.hpp) with one layer's switches on:
// every value computed before those switches is the float model's, the same for every row. So
// each evaluation batch runs the model once with every switch off, keeping the values the rows
// read from that float prefix, and each row runs only the nodes its switches reach (the layer
// and what follows it), from those values. The rows' outputs are the whole model's with the
// layer's switches on: the same ops on the same values.
//
// Memory: one evaluation batch's kept values at a time (about every activation of one batch for a
// chain of layers), plus each row's outputs over the evaluated samples (per_layer_samples caps them).
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/script.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"

namespace versatil::libtorch {

namespace detail {

using ::torch::jit::Block;
using ::torch::jit::Graph;
using ::torch::jit::Node;
using ::torch::jit::Value;

// The node at the graph's top level that holds `node`: itself, or the If / Loop around it. The
// graph's inputs belong to its param node.
inline const Node* top_level(const Node* node, const Block* top) {
    while (node->owningBlock() != top) node = node->owningBlock()->owningNode();
    return node;
}

// The top-level values `node` reads: its inputs and what the nodes in its blocks read from outside.
inline void values_read(const Node* node, const Node* holder, const Block* top, std::vector<const Value*>& read) {
    for (const Value* input : node->inputs())
        if (top_level(input->node(), top) != holder) read.push_back(input);
    for (const Block* block : node->blocks()) {
        for (const Node* inner : block->nodes()) values_read(inner, holder, top, read);
        values_read(block->return_node(), holder, top, read);
    }
}

// Whether a row recomputes `node`'s value rather than reading it from the float prefix: a
// constant, or an attribute of the module (weights, switches), for free.
inline bool recomputed(const Node* node) {
    if (node->kind() == c10::prim::Constant) return true;
    if (node->kind() != c10::prim::GetAttr) return false;
    const Value* object = node->input(0);
    return object == node->owningGraph()->inputs()[0] || recomputed(object->node());
}

inline void find_switches(const Block* block, const std::set<std::string>& names, std::set<std::string>& found,
                          std::unordered_set<const Node*>& seeds, const Block* top) {
    for (const Node* node : block->nodes()) {
        if (node->kind() == c10::prim::If && node->input(0)->node()->kind() == c10::prim::GetAttr) {
            const std::string& name = node->input(0)->node()->s(c10::attr::name);
            if (names.contains(name)) {
                found.insert(name);
                seeds.insert(top_level(node, top));
            }
        }
        for (const Block* inner : node->blocks()) find_switches(inner, names, found, seeds, top);
    }
}

inline bool sets_attributes(const Block* block) {
    return std::ranges::any_of(block->nodes(), [](const Node* node) {
        return node->kind() == c10::prim::SetAttr ||
               std::ranges::any_of(node->blocks(), [](const Block* inner) { return sets_attributes(inner); });
    });
}

// What a row runs: the top-level nodes its switches reach, and the prefix values they read.
struct row_slice {
    std::unordered_set<const Node*> reached;
    std::vector<const Value*> reads;  // values of the float prefix, in the order the row's graph takes them
};

// The slice of `graph` a row with `names` on runs, or none when a switch is not where this can
// find it (inside a method the forward calls).
inline std::optional<row_slice> slice_for(const Graph& graph, const std::vector<std::string>& names) {
    const Block* top = graph.block();
    const std::set<std::string> wanted(names.begin(), names.end());
    std::set<std::string> found;
    row_slice slice;
    find_switches(top, wanted, found, slice.reached, top);
    if (found != wanted) return std::nullopt;
    std::unordered_set<const Value*> read_set;
    std::unordered_set<const Value*> changed;  // outputs of reached nodes
    const auto take = [&](const Node* reader) {
        std::vector<const Value*> read;
        values_read(reader, reader, top, read);
        bool reaches = slice.reached.contains(reader);
        for (const Value* value : read) reaches = reaches || changed.contains(value);
        // The return reads the prefix's values even where no switch reaches it (a row with no
        // switches, such as a layer the converted model left float): the row returns those.
        if (!reaches && reader->kind() != c10::prim::Return) return;
        for (const Value* value : read)
            if (!changed.contains(value) && !recomputed(value->node()) && value != graph.inputs()[0] &&
                read_set.insert(value).second)
                slice.reads.push_back(value);
        if (reader->kind() == c10::prim::Return) return;
        slice.reached.insert(reader);
        for (const Value* output : reader->outputs()) changed.insert(output);
    };
    for (const Node* node : top->nodes()) take(node);
    take(top->return_node());
    return slice;
}

// The top-level values of `copy` that stand for `original`'s (a copy keeps the order of nodes).
inline std::unordered_map<const Value*, Value*> matching_values(const Graph& original, Graph& copy) {
    std::unordered_map<const Value*, Value*> match;
    for (std::size_t i = 0; i < original.inputs().size(); ++i) match[original.inputs()[i]] = copy.inputs()[i];
    auto theirs = copy.nodes().begin();
    for (const Node* node : original.nodes()) {
        for (std::size_t i = 0; i < node->outputs().size(); ++i) match[node->outputs()[i]] = theirs->outputs()[i];
        ++theirs;
    }
    return match;
}

// A row's graph: inputs self, then `slice.reads`; the reached nodes and what they need of
// constants and attributes.
inline std::shared_ptr<Graph> row_graph(Graph& graph, const row_slice& slice) {
    std::shared_ptr<Graph> copy = graph.copy();
    const std::unordered_map<const Value*, Value*> match = matching_values(graph, *copy);
    for (const Value* read : slice.reads) {
        Value* input = copy->addInput()->setType(read->type());
        match.at(read)->replaceAllUsesWith(input);
    }
    std::vector<Node*> dropped;
    auto theirs = copy->nodes().begin();
    for (const Node* node : graph.nodes()) {
        if (!slice.reached.contains(node) && !recomputed(node)) dropped.push_back(*theirs);
        ++theirs;
    }
    for (auto node = dropped.rbegin(); node != dropped.rend(); ++node) (*node)->destroy();
    // The batch's inputs: a row reads them as values of the prefix.
    for (std::size_t i = graph.inputs().size() - 1; i >= 1; --i) copy->eraseInput(i);
    ::torch::jit::EliminateDeadCode(copy);
    return copy;
}

// The float prefix's graph: the model with its outputs replaced by `kept`, each copied where the
// model later writes to it in place (the value the rows read is the one before the write).
inline std::shared_ptr<Graph> prefix_graph(Graph& graph, const std::vector<const Value*>& kept) {
    std::shared_ptr<Graph> copy = graph.copy();
    const std::unordered_map<const Value*, Value*> match = matching_values(graph, *copy);
    while (!copy->outputs().empty()) copy->eraseOutput(0);
    const ::torch::jit::AliasDb aliases(copy);
    std::vector<Value*> outputs;
    for (const Value* value : kept) {
        Value* theirs = match.at(value);
        if (theirs->type()->cast<c10::TensorType>() && aliases.hasWriters(theirs)) {
            const ::torch::jit::WithInsertPoint after(theirs->node()->kind() == c10::prim::Param
                                                          ? *copy->nodes().begin()
                                                          : theirs->node()->next());
            theirs = copy->insert(c10::aten::clone, {theirs});
        }
        outputs.push_back(theirs);
    }
    const ::torch::jit::WithInsertPoint at_end(copy->return_node());
    copy->registerOutput(copy->insertNode(copy->createTuple(outputs))->output());  // a function returns one value
    return copy;
}

}  // namespace detail

// Each row's outputs (run_batches' form) of `switched` over `batches`, a row being the module's
// bool switch attributes `rows[i]` turned on, all others off, as they are on entry. `row_done(i)`
// is called when row i has run on every batch.
inline std::vector<model_outputs> outputs_per_row(const ::torch::jit::Module& switched,
                                                  const std::vector<std::vector<std::string>>& rows,
                                                  const std::vector<batch>& batches,
                                                  const std::function<void(std::size_t)>& row_done = {}) {
    using namespace detail;
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = switched;
    const std::shared_ptr<Graph> graph = module.get_method("forward").graph();
    // A row whose switches this cannot find, or a model that sets attributes as it runs, runs whole.
    std::vector<std::optional<row_slice>> slices;
    for (const std::vector<std::string>& names : rows)
        slices.push_back(sets_attributes(graph->block()) ? std::nullopt : slice_for(*graph, names));
    std::vector<const Value*> kept;
    std::unordered_map<const Value*, std::size_t> kept_at;
    for (const std::optional<row_slice>& slice : slices)
        if (slice)
            for (const Value* read : slice->reads)
                if (kept_at.emplace(read, kept.size()).second) kept.push_back(read);
    ::torch::jit::GraphFunction prefix("float_prefix", prefix_graph(*graph, kept), nullptr);
    std::vector<std::unique_ptr<::torch::jit::GraphFunction>> row_runs;
    std::vector<std::vector<bool>> copied_inputs;  // rows that write to a prefix value in place get a copy of it
    for (const std::optional<row_slice>& slice : slices) {
        if (!slice) {
            row_runs.emplace_back();
            copied_inputs.emplace_back();
            continue;
        }
        std::shared_ptr<Graph> row = row_graph(*graph, *slice);
        const ::torch::jit::AliasDb aliases(row);
        std::vector<bool> copied;
        bool writes_other_values = false;  // a list or object it changes: that row runs whole
        for (std::size_t i = 1; i < row->inputs().size(); ++i) {
            const Value* input = row->inputs()[i];
            const bool written = aliases.hasWriters(input);
            copied.push_back(written);
            writes_other_values = writes_other_values || (written && !input->type()->cast<c10::TensorType>());
        }
        if (writes_other_values) {
            row_runs.emplace_back();
            copied_inputs.emplace_back();
            continue;
        }
        copied_inputs.push_back(std::move(copied));
        row_runs.push_back(std::make_unique<::torch::jit::GraphFunction>("row", std::move(row), nullptr));
    }

    std::vector<std::vector<std::vector<at::Tensor>>> parts(rows.size());  // row, output, batch
    std::vector<model_outputs> outputs(rows.size());
    const auto keep = [&](std::size_t row, const c10::IValue& returned) {
        const std::vector<named_output> flat = flatten_output(returned);
        if (parts[row].empty()) {
            for (const named_output& output : flat) outputs[row].names.push_back(output.name);
            parts[row].resize(flat.size());
        }
        for (std::size_t i = 0; i < flat.size() && i < parts[row].size(); ++i) {
            const at::Tensor& tensor = flat[i].tensor;
            parts[row][i].push_back((tensor.dim() == 0 ? tensor.unsqueeze(0) : tensor).to(at::kFloat));
        }
    };
    for (std::size_t b = 0; b < batches.size(); ++b) {
        ::torch::jit::Stack stack_of_prefix{module._ivalue()};
        for (const c10::IValue& argument : batches[b].arguments()) stack_of_prefix.push_back(argument);
        if (!kept.empty()) prefix.run(stack_of_prefix);
        const std::vector<c10::IValue> prefix_values =
            kept.empty() ? std::vector<c10::IValue>{} : stack_of_prefix.back().toTupleRef().elements().vec();
        for (std::size_t row = 0; row < rows.size(); ++row) {
            for (const std::string& name : rows[row]) module.setattr(name, true);
            if (!row_runs[row]) {
                keep(row, module.forward(batches[b].arguments()));
            } else {
                ::torch::jit::Stack stack{module._ivalue()};
                for (std::size_t i = 0; i < slices[row]->reads.size(); ++i) {
                    const c10::IValue& value = prefix_values[kept_at.at(slices[row]->reads[i])];
                    const bool copied = copied_inputs[row][i] && value.isTensor();
                    stack.push_back(copied ? c10::IValue(value.toTensor().clone()) : value);
                }
                row_runs[row]->run(stack);
                keep(row, stack.back());
            }
            for (const std::string& name : rows[row]) module.setattr(name, false);
            if (b + 1 == batches.size() && row_done) row_done(row);
        }
    }
    for (std::size_t row = 0; row < rows.size(); ++row)
        for (const std::vector<at::Tensor>& output : parts[row]) outputs[row].tensors.push_back(at::cat(output));
    return outputs;
}

}  // namespace versatil::libtorch
