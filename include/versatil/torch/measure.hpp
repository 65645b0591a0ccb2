// Measurements the report is made of: outputs compared against the float model, serialized
// size, latency (median of repeated runs after warm-up), top-1 accuracy and op counts.
#pragma once

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "versatil/torch/error.hpp"

namespace versatil::libtorch {

inline at::Tensor forward_tensor(::torch::jit::Module& module, const at::Tensor& input) {
    const c10::IValue output = module.forward({input});
    if (!output.isTensor())
        throw error(error_kind::invalid_argument, "the model's forward must return one tensor, not " +
                                                      output.tagKind());
    return output.toTensor();
}

// Outputs for each batch, concatenated along dim 0 (no gradients).
inline at::Tensor run_batches(const ::torch::jit::Module& model, const std::vector<at::Tensor>& batches) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = model;
    std::vector<at::Tensor> outputs;
    outputs.reserve(batches.size());
    for (const at::Tensor& batch : batches) outputs.push_back(forward_tensor(module, batch).to(at::kFloat));
    return at::cat(outputs);
}

struct output_comparison {
    double max_abs_diff = 0.0;
    double mean_abs_diff = 0.0;
    double sqnr_db = std::numeric_limits<double>::infinity();  // infinite when identical
};

// Signal-to-quantization-noise ratio of `actual` against `reference`:
// 10 log10(sum(reference^2) / sum((reference - actual)^2)).
inline output_comparison compare_outputs(const at::Tensor& reference, const at::Tensor& actual) {
    const at::Tensor ref = reference.to(at::kDouble), act = actual.to(at::kDouble);
    const at::Tensor difference = (ref - act).abs();
    output_comparison result;
    result.max_abs_diff = difference.max().item<double>();
    result.mean_abs_diff = difference.mean().item<double>();
    const double noise = difference.pow(2).sum().item<double>();
    const double signal = ref.pow(2).sum().item<double>();
    if (noise > 0.0) result.sqnr_db = 10.0 * std::log10(signal / noise);
    return result;
}

inline std::int64_t serialized_bytes(const ::torch::jit::Module& model) {
    std::ostringstream stream;
    model.save(stream);
    return static_cast<std::int64_t>(stream.tellp());
}

// Median wall time of one forward, in milliseconds: `warmup` runs first, then at least
// `min_runs` runs and at least `min_seconds` in all.
inline double median_latency_ms(const ::torch::jit::Module& model, const at::Tensor& input, int warmup = 5,
                                int min_runs = 20, double min_seconds = 0.25) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = model;
    for (int i = 0; i < warmup; ++i) forward_tensor(module, input);
    std::vector<double> times;
    const auto begin = std::chrono::steady_clock::now();
    while (static_cast<int>(times.size()) < min_runs ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < min_seconds) {
        const auto start = std::chrono::steady_clock::now();
        forward_tensor(module, input);
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        if (times.size() >= 2000) break;
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
}

inline double top1_accuracy(const at::Tensor& logits, const at::Tensor& labels) {
    if (logits.size(0) != labels.size(0))
        throw error(error_kind::invalid_data_file, "the labels (" + std::to_string(labels.size(0)) +
                                                       ") do not match the test samples (" +
                                                       std::to_string(logits.size(0)) + ")");
    return logits.argmax(1).eq(labels.to(at::kLong)).to(at::kDouble).mean().item<double>();
}

// Nodes of `kinds` in a module's forward, with every submodule call inlined.
inline std::int64_t count_nodes(const ::torch::jit::Module& model, bool (*matches)(std::string_view kind)) {
    auto graph = model.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    std::int64_t count = 0;
    for (const ::torch::jit::Node* node : graph->nodes())
        count += matches(node->kind().toQualString()) ? 1 : 0;
    return count;
}

// Conv and linear: the weighted ops a backend quantizes.
inline bool is_quantizable_op(std::string_view kind) {
    return kind == "aten::linear" || kind == "aten::conv1d" || kind == "aten::conv2d" || kind == "aten::conv3d" ||
           kind == "aten::_convolution";
}

inline bool is_quantized_op(std::string_view kind) {
    return kind.starts_with("quantized::") &&
           (kind.find("conv") != std::string_view::npos || kind.find("linear") != std::string_view::npos) &&
           kind.find("prepack") == std::string_view::npos && kind.find("unpack") == std::string_view::npos;
}

}  // namespace versatil::libtorch
