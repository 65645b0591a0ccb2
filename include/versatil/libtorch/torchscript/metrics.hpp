// Measurements the report is made of: outputs compared against the float model, serialized
// size, latency (median of repeated runs after warm-up), top-1 accuracy and op counts.
#pragma once

#include <ATen/record_function.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"

namespace versatil::libtorch {

// A model's outputs over many batches: each tensor it returns, concatenated along dim 0.
struct model_outputs {
    std::vector<std::string> names;
    std::vector<at::Tensor> tensors;
};

// Outputs for each batch, concatenated along dim 0, as float (no gradients).
inline model_outputs run_batches(const ::torch::jit::Module& model, const std::vector<batch>& batches) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = model;
    model_outputs outputs;
    std::vector<std::vector<at::Tensor>> parts;
    for (const batch& inputs : batches) {
        const std::vector<named_output> returned = flatten_output(module.forward(inputs.arguments()));
        if (parts.empty()) {
            for (const named_output& output : returned) outputs.names.push_back(output.name);
            parts.resize(returned.size());
        }
        if (returned.size() != parts.size())
            throw error(error_kind::unsupported_model, "the model returned " + std::to_string(returned.size()) +
                                                           " tensors for one batch and " +
                                                           std::to_string(parts.size()) + " for another");
        for (std::size_t i = 0; i < returned.size(); ++i) {
            const at::Tensor& tensor = returned[i].tensor;
            parts[i].push_back((tensor.dim() == 0 ? tensor.unsqueeze(0) : tensor).to(at::kFloat));
        }
    }
    for (const std::vector<at::Tensor>& output : parts) outputs.tensors.push_back(at::cat(output));
    return outputs;
}

struct output_comparison {
    std::string name;  // the output's place ("" for a lone tensor or for all outputs together)
    double max_abs_diff = 0.0;
    double mean_abs_diff = 0.0;
    double sqnr_db = std::numeric_limits<double>::infinity();  // infinite when identical
};

// Signal-to-quantization-noise ratio from the two energies, sum(reference^2) and
// sum((reference - actual)^2): 10 log10(signal / noise), infinite where there is no noise.
inline double sqnr_db_from(double signal, double noise) {
    return noise > 0.0 ? 10.0 * std::log10(signal / noise) : std::numeric_limits<double>::infinity();
}

// Signal-to-quantization-noise ratio of `actual` against `reference` (sqnr_db_from).
inline output_comparison compare_outputs(const at::Tensor& reference, const at::Tensor& actual) {
    const at::Tensor ref = reference.to(at::kDouble), act = actual.to(at::kDouble);
    const at::Tensor difference = (ref - act).abs();
    output_comparison result;
    result.max_abs_diff = difference.max().item<double>();
    result.mean_abs_diff = difference.mean().item<double>();
    const double noise = difference.pow(2).sum().item<double>();
    const double signal = ref.pow(2).sum().item<double>();
    result.sqnr_db = sqnr_db_from(signal, noise);
    return result;
}

// An SQNR as the report's adjustments write it: "31.42 dB", or "exact" when infinite (no noise).
inline std::string sqnr_text(double sqnr_db) {
    if (std::isinf(sqnr_db)) return "exact";
    char text[32];
    std::snprintf(text, sizeof text, "%.2f dB", sqnr_db);
    return text;
}

// Every output compared on its own, then all together (their values as one signal).
struct outputs_comparison {
    output_comparison overall;
    std::vector<output_comparison> outputs;  // one per returned tensor
};

inline outputs_comparison compare_outputs(const model_outputs& reference, const model_outputs& actual) {
    outputs_comparison result;
    std::vector<at::Tensor> all_reference, all_actual;
    for (std::size_t i = 0; i < reference.tensors.size(); ++i) {
        output_comparison one = compare_outputs(reference.tensors[i], actual.tensors.at(i));
        one.name = reference.names[i];
        result.outputs.push_back(one);
        all_reference.push_back(reference.tensors[i].flatten());
        all_actual.push_back(actual.tensors[i].flatten());
    }
    result.overall = compare_outputs(at::cat(all_reference), at::cat(all_actual));
    return result;
}

inline std::int64_t serialized_bytes(const ::torch::jit::Module& model) {
    std::ostringstream stream;
    model.save(stream);
    return static_cast<std::int64_t>(stream.tellp());
}

// The spread of timed runs: the 10th, 50th and 90th percentiles, each interpolated linearly
// between the two nearest sorted runs (numpy.percentile's default), so that one slow or fast
// outlier in a few dozen runs does not move p10 or p90 alone.
struct latency_spread {
    double p10_ms = 0.0;
    double median_ms = 0.0;
    double p90_ms = 0.0;
    std::int64_t runs = 0;
    // Runs that disagree by more than 2x (p90 over p10): the figure is the machine's noise, not the model's.
    bool unsteady() const { return p10_ms > 0.0 && p90_ms / p10_ms > 2.0; }
};

inline latency_spread spread_of(std::vector<double> times_ms) {
    if (times_ms.empty()) return {};
    std::sort(times_ms.begin(), times_ms.end());
    const auto percentile = [&](double p) {
        const double rank = p * static_cast<double>(times_ms.size() - 1);
        const auto below = static_cast<std::size_t>(rank);
        const std::size_t above = std::min(below + 1, times_ms.size() - 1);
        return times_ms[below] + (rank - static_cast<double>(below)) * (times_ms[above] - times_ms[below]);
    };
    return {percentile(0.1), percentile(0.5), percentile(0.9), static_cast<std::int64_t>(times_ms.size())};
}

// Wall times of one forward, in milliseconds: `warmup` runs first, then at least `min_runs` runs
// and at least `min_seconds` in all (at most 2000).
inline std::vector<double> timed_runs_ms(const ::torch::jit::Module& model, const batch& input, int warmup = 5,
                                         int min_runs = 20, double min_seconds = 0.25) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = model;
    const std::vector<c10::IValue> arguments = input.arguments();
    for (int i = 0; i < warmup; ++i) module.forward(arguments);
    std::vector<double> times;
    const auto begin = std::chrono::steady_clock::now();
    while (static_cast<int>(times.size()) < min_runs ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < min_seconds) {
        const auto start = std::chrono::steady_clock::now();
        module.forward(arguments);
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        if (times.size() >= 2000) break;
    }
    return times;
}

// Median wall time of one forward, in milliseconds (timed_runs_ms; the upper median).
inline double median_latency_ms(const ::torch::jit::Module& model, const batch& input, int warmup = 5,
                                int min_runs = 20, double min_seconds = 0.25) {
    std::vector<double> times = timed_runs_ms(model, input, warmup, min_runs, min_seconds);
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
}

// Top-1 accuracy of the model's first output, taken as class logits.
inline double top1_accuracy(const model_outputs& outputs, const at::Tensor& labels) {
    const at::Tensor& logits = outputs.tensors.front();
    if (logits.size(0) != labels.size(0))
        throw error(error_kind::invalid_data_file, "the labels (" + std::to_string(labels.size(0)) +
                                                       ") do not match the test samples (" +
                                                       std::to_string(logits.size(0)) + ")");
    return logits.argmax(1).eq(labels.to(at::kLong)).to(at::kDouble).mean().item<double>();
}

inline bool is_linear_op(std::string_view kind) { return kind == "aten::linear"; }

// Conv and linear: the weighted ops a backend quantizes.
inline bool is_quantizable_op(std::string_view kind) {
    return is_linear_op(kind) || kind == "aten::conv1d" || kind == "aten::conv2d" || kind == "aten::conv3d";
}

// Dynamic quantization in this LibTorch quantizes linear layers only.
inline auto quantizable_op_test(bool dynamic) { return dynamic ? is_linear_op : is_quantizable_op; }

// What the report counts: for dynamic quantization the recurrent layers too, which are quantized
// whole (passes/recurrent_dynamic.hpp), not per linear op; an RNN, which LibTorch cannot
// quantize, counts as a layer that stays float.
inline bool is_linear_or_recurrent_op(std::string_view kind) {
    return is_linear_op(kind) || kind == "aten::lstm" || kind == "aten::gru" || kind == "aten::rnn_tanh" ||
           kind == "aten::rnn_relu";
}
inline auto counted_op_test(bool dynamic) { return dynamic ? is_linear_or_recurrent_op : is_quantizable_op; }

// The ops that run the steps of a recurrent layer: LibTorch's float kernels call aten::linear for
// every step, which is the layer's work, not a layer of its own.
inline bool is_recurrent_op(std::string_view kind) {
    return kind == "aten::lstm" || kind == "aten::gru" || kind == "aten::rnn_tanh" || kind == "aten::rnn_relu" ||
           kind == "aten::quantized_lstm" || kind == "aten::quantized_gru";
}

namespace detail {
// Nodes of `kinds` in a module's forward at any depth, with every submodule and function
// call inlined: every call site counts, in `if` and loop bodies too.
inline std::int64_t count_nodes(const ::torch::jit::Module& model, bool (*matches)(std::string_view kind)) {
    auto graph = model.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    return static_cast<std::int64_t>(nodes_where(graph, [&](const ::torch::jit::Node* node) {
                                         return matches(node->kind().toQualString());
                                     }).size());
}

inline thread_local std::map<std::string, std::int64_t>* executed_op_counts = nullptr;

inline thread_local int inside_recurrent_ops = 0;
struct recurrent_call : at::ObserverContext {};  // marks a recurrent op's call for its end callback

// Ops called inside a recurrent op are not counted (see is_recurrent_op); the context returned
// for a recurrent op marks the call whose end leaves it.
inline std::unique_ptr<at::ObserverContext> count_executed_op(const at::RecordFunction& call) {
    if (executed_op_counts && inside_recurrent_ops == 0) ++(*executed_op_counts)[call.name()];
    if (!is_recurrent_op(call.name())) return nullptr;
    ++inside_recurrent_ops;
    return std::make_unique<recurrent_call>();
}

inline void end_executed_op(const at::RecordFunction&, at::ObserverContext* recurrent) {
    if (recurrent) --inside_recurrent_ops;
}
}  // namespace detail

// How often one forward on `inputs` runs each op, by name, as LibTorch's profiler sees them:
// every call site that runs counts, whichever module, method or function it sits in, and
// branches that do not run do not; the ops a recurrent layer runs for its steps are its own.
inline std::map<std::string, std::int64_t> executed_ops(const ::torch::jit::Module& model, const batch& inputs) {
    std::map<std::string, std::int64_t> counts;
    ::torch::jit::Module module = model;
    const ::torch::NoGradGuard no_grad;
    struct counting {  // stops counting when the scope ends, by return or by exception
        at::CallbackHandle handle;
        ~counting() {
            at::removeCallback(handle);
            detail::executed_op_counts = nullptr;
            detail::inside_recurrent_ops = 0;  // a forward that threw may have left a recurrent op unended
        }
    };
    detail::executed_op_counts = &counts;
    const counting scope{
        at::addThreadLocalCallback(at::RecordFunctionCallback(&detail::count_executed_op, &detail::end_executed_op)
                                       .scopes({at::RecordScope::FUNCTION}))};
    module.forward(inputs.arguments());
    return counts;
}

inline std::int64_t count_ops(const std::map<std::string, std::int64_t>& counts,
                              bool (*matches)(std::string_view kind)) {
    std::int64_t total = 0;
    for (const auto& [name, count] : counts)
        if (matches(name)) total += count;
    return total;
}

// Whether a module calls an op of `kinds` itself, from forward or any helper method such as
// Conv2d's _conv_forward (calls into its submodules are theirs).
inline bool calls_op(const ::torch::jit::Module& module, bool (*matches)(std::string_view kind)) {
    for (const auto& graph : method_graphs(module.type()))
        if (!nodes_where(graph, [&](const ::torch::jit::Node* node) { return matches(node->kind().toQualString()); })
                 .empty())
            return true;
    return false;
}

inline bool is_quantized_op(std::string_view kind) {
    if (kind == "aten::quantized_lstm" || kind == "aten::quantized_gru") return true;
    return kind.starts_with("quantized::") &&
           (kind.find("conv") != std::string_view::npos || kind.find("linear") != std::string_view::npos) &&
           kind.find("prepack") == std::string_view::npos && kind.find("unpack") == std::string_view::npos;
}

}  // namespace versatil::libtorch
