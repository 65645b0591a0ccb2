// Trains a TorchScript classifier from C++ (QAT's loop, qat.hpp; the demo models of demo/models.hpp)
// and measures its top-1 accuracy.
// Quantization has to be tested on a trained model: the weights and activation ranges of a random
// one say nothing about how much accuracy a backend loses. Trains with cross-entropy on mini-batches
// drawn without replacement (reshuffled every epoch) and torch::optim over the module's parameters.
#pragma once

// torch/enum.h (pulled in by the optimizers) has an unused parameter, and meson passes LibTorch's
// include directories with -I, so it would warn in every user of this header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <torch/torch.h>
#pragma GCC diagnostic pop

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/engine.hpp"
#include "versatil/libtorch/torchscript/metrics.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"

namespace versatil::libtorch {

enum class optimizer_kind { adam, sgd };

struct training_options {
    int64_t steps = 0;              // mini-batch updates to run; must be positive
    int64_t batch_size = 64;
    double learning_rate = 1e-3;
    uint64_t seed = 0;              // the order of the examples
    optimizer_kind optimizer = optimizer_kind::adam;
    double momentum = 0.9;          // SGD only
    double weight_decay = 0.0;
    // Intra-op threads while training, restored afterwards; 0 keeps LibTorch's current setting.
    // Measured on the 2-vCPU build machine: small_cnn_mlp at batch 64 takes 55 ms a step with 1
    // thread (LibTorch's default here) and 450 ms with 2, so more threads is not the default.
    int num_threads = 0;
    std::function<void(int64_t step, double loss)> on_step = nullptr;  // called after every step, if set
    // Data parallelism (distributed/qat.hpp sets these): every process draws the same batches
    // of batch_size x shards examples (same seed, so the same order as one process training
    // with that batch size) and trains on slice `shard` of each, batch_size examples. One
    // process: shard 0 of 1, the whole batch.
    int64_t shard = 0;
    int64_t shards = 1;
    // Called after backward and before the optimizer's step, if set, with the parameters (their
    // gradients filled in) and the step's loss, which it may replace: where data-parallel
    // training averages gradients and losses across processes.
    std::function<void(int64_t step, const std::vector<at::Tensor>& parameters, double& loss)> after_backward = nullptr;
};

struct training_result {
    std::vector<double> losses;  // the mini-batch loss of every step, in order
    double final_loss = 0.0;     // mean of the last min(50, steps) losses: less noisy than the last one
};

namespace detail {

inline void check_examples(const at::Tensor& images, const at::Tensor& labels, const char* function) {
    const std::string prefix = std::string(function) + ": ";
    if (!images.defined() || !labels.defined() || images.dim() < 1 || labels.dim() != 1)
        throw error(error_kind::invalid_argument, prefix + "needs images [N, ...] and labels [N]");
    if (images.size(0) != labels.size(0))
        throw error(error_kind::invalid_argument, prefix + std::to_string(images.size(0)) + " images but " +
                                                      std::to_string(labels.size(0)) + " labels");
    if (images.size(0) == 0) throw error(error_kind::invalid_argument, prefix + "no examples");
    if (labels.scalar_type() != at::kLong)
        throw error(error_kind::invalid_argument, prefix + "labels must be int64 class indices");
}

inline at::Tensor logits_of(::torch::jit::Module& model, const at::Tensor& batch) {
    const auto output = model.forward({batch});
    if (!output.isTensor())
        throw error(error_kind::invalid_argument, "the model's forward must return a logits tensor [N, classes]");
    return output.toTensor();
}

}  // namespace detail

// Trains `model` in place: model.train(), `options.steps` updates of the chosen optimizer on the
// cross-entropy of the model's logits, then model.eval(). Every parameter of the module is
// trained (requires_grad is switched on). Deterministic for a seed and a thread count.
inline training_result train_classifier(::torch::jit::Module& model, const at::Tensor& images, const at::Tensor& labels,
                                        const training_options& options) {
    detail::check_examples(images, labels, "train_classifier");
    if (options.steps <= 0 || options.batch_size <= 0 || !(options.learning_rate > 0.0))
        throw error(error_kind::invalid_argument,
                    "train_classifier: steps, batch_size and learning_rate must be positive");
    if (options.shards <= 0 || options.shard < 0 || options.shard >= options.shards)
        throw error(error_kind::invalid_argument, "train_classifier: shard must be from 0 to shards - 1");
    if (options.shards > 1 && options.batch_size * options.shards > images.size(0))
        throw error(error_kind::invalid_argument,
                    "train_classifier: a batch of " + std::to_string(options.batch_size) + " per process across " +
                        std::to_string(options.shards) + " processes needs " +
                        std::to_string(options.batch_size * options.shards) + " training examples, and there are " +
                        std::to_string(images.size(0)) + "; give a smaller batch or fewer processes");

    const scoped_num_threads threads(options.num_threads);
    reset_parameters(model, /*trainable=*/true);  // a cloned model's parameters are not leaves
    std::vector<at::Tensor> parameters;
    for (const auto& parameter : model.parameters()) parameters.push_back(parameter);
    if (parameters.empty()) throw error(error_kind::invalid_argument, "train_classifier: the model has no parameters");

    std::unique_ptr<::torch::optim::Optimizer> optimizer;
    if (options.optimizer == optimizer_kind::adam)
        optimizer = std::make_unique<::torch::optim::Adam>(
            parameters, ::torch::optim::AdamOptions(options.learning_rate).weight_decay(options.weight_decay));
    else
        optimizer = std::make_unique<::torch::optim::SGD>(
            parameters, ::torch::optim::SGDOptions(options.learning_rate)
                            .momentum(options.momentum)
                            .weight_decay(options.weight_decay));

    const int64_t count = images.size(0);
    // The batch every process draws (the global batch); this process trains on its slice.
    const int64_t batch_size = std::min(options.batch_size * options.shards, count);
    const int64_t slice_begin = batch_size / options.shards * options.shard;
    const int64_t slice_end = slice_begin + batch_size / options.shards;
    auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
    at::Tensor order;
    int64_t position = count;  // forces a shuffle before the first batch

    training_result result;
    result.losses.reserve(static_cast<size_t>(options.steps));
    model.train();
    try {
        for (int64_t step = 0; step < options.steps; ++step) {
            if (position + batch_size > count) {
                order = at::randperm(count, generator, at::kLong);
                position = 0;
            }
            const auto indices = order.slice(0, position + slice_begin, position + slice_end);
            position += batch_size;
            const auto logits = detail::logits_of(model, images.index_select(0, indices));
            const auto loss = at::cross_entropy_loss(logits, labels.index_select(0, indices));
            optimizer->zero_grad();
            loss.backward();
            double value = loss.item<double>();
            if (options.after_backward) options.after_backward(step, parameters, value);
            optimizer->step();
            result.losses.push_back(value);
            if (options.on_step) options.on_step(step, value);
        }
    } catch (...) {
        model.eval();
        throw;
    }
    model.eval();

    const size_t tail = std::min<size_t>(50, result.losses.size());
    const auto last = result.losses.end() - static_cast<std::ptrdiff_t>(tail);
    result.final_loss = std::accumulate(last, result.losses.end(), 0.0) / static_cast<double>(tail);
    return result;
}

// The fraction of `images` whose highest logit is the label, in eval mode and without autograd
// (torchscript/metrics.hpp's top1_accuracy of the model's outputs). The model's training flag is restored
// afterwards.
inline double top1_accuracy(const ::torch::jit::Module& model, const at::Tensor& images, const at::Tensor& labels,
                            int64_t batch_size = 256) {
    detail::check_examples(images, labels, "top1_accuracy");
    if (batch_size <= 0) throw error(error_kind::invalid_argument, "top1_accuracy: batch_size must be positive");
    // forward() is not const on a Module, but a Module is a handle: the copy runs the same object.
    ::torch::jit::Module runner = model;
    const bool was_training = runner.is_training();
    runner.eval();
    const double accuracy = top1_accuracy(run_batches(runner, split_batches(images, batch_size)), labels);
    if (was_training) runner.train();
    return accuracy;
}

}  // namespace versatil::libtorch
