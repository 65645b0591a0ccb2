// Quantization-aware training across the processes of a world, as DistributedDataParallel
// trains: every rank starts from rank 0's weights (broadcast), draws the same global batches
// (same seed) of batch_size x world size examples and trains on its own slice of batch_size;
// after backward, the gradients (and the step's loss) are summed over the ranks in one
// flattened all-reduce and divided by the world size, so every rank's optimizer takes the same
// step, and one process training with batch_size x world size is the reference.
//
// The fake-quantize ranges (moving-average min/max, fake_quantize.hpp) move in each rank's
// forward from its own slice; after each step they are merged with one MIN all-reduce (of the
// minimums and the negated maximums). The update of a range from a batch's minimum x is
// m' = m + c (x - m), computed in float32 as fl(m + fl(c fl(x - m))) with c in (0, 1]: each
// operation is monotone non-decreasing in x (so is rounding), so the whole update is, and for ranks that
// start the step from the same m (they do: the previous step ended with a merge),
// min over ranks of m + c (x_r - m) = m + c (min over ranks of x_r) bit for bit, which is the
// update with the global batch's minimum (the first observation, m' = x, likewise); maximums
// the same way (tests/torch/distributed.cpp checks it on real activations). What stays
// different from one process: within the step where a range moved,
// each rank's forward fake-quantized with its own update (from its slice's minimum and maximum,
// inside the global batch's), so that step's outputs and gradients, and the values later
// fake-quantizers saw, are not exactly one process's. Once ranges are frozen, only the order of
// float sums differs (a mean over the global batch against a mean of per-rank means).
//
// Weight fake-quantizers need no merge (their input, the weights, is the same on every rank),
// but the merge covers every fake-quantizer: one exchange, and weights stay bit
// for bit equal on every rank without relying on that.
//
// Batch norms that follow no convolution (prepare folds the others) are not synchronized: each
// rank normalizes its slice with the slice's statistics, as DDP without SyncBatchNorm does.
#pragma once

#include <torch/script.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "versatil/libtorch/distributed/process_group.hpp"
#include "versatil/libtorch/stages/qat.hpp"
#include "versatil/libtorch/observers/observer_state.hpp"

namespace versatil::libtorch {

struct distributed_qat {
    qat_result training;                         // losses: the global batch's (averaged across ranks)
    std::vector<std::int64_t> samples_per_rank;  // training examples each rank trained on, indexed by rank
    double start_seconds = 0.0;                  // agreeing on the data, broadcasting rank 0's weights
    double gradient_seconds = 0.0;  // the per-step gradient exchanges (waiting for the slowest rank included)
    double range_seconds = 0.0;                  // the per-step merges of fake-quantize ranges
};

namespace detail {

// Tensors flattened into one, and copied back out of it, in order.
inline at::Tensor flat_concatenation(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& tensor : tensors) flat.push_back(tensor.detach().to(at::kFloat).reshape({-1}));
    return flat.empty() ? at::zeros({0}, at::kFloat) : at::cat(flat);
}

inline void copy_back(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
    const ::torch::NoGradGuard no_grad;
    std::int64_t offset = 0;
    for (const at::Tensor& tensor : tensors) {
        at::Tensor target = tensor;
        target.copy_(flat.slice(0, offset, offset + tensor.numel()).view(tensor.sizes()));
        offset += tensor.numel();
    }
}

// The model's floating-point state: parameters, then buffers (fake-quantize ranges, batch-norm
// statistics), in module order, which is the same on every rank for the same model.
inline std::vector<at::Tensor> floating_state(const ::torch::jit::Module& model) {
    std::vector<at::Tensor> state;
    for (const at::Tensor& parameter : model.parameters()) state.push_back(parameter);
    for (const at::Tensor& buffer : model.buffers())
        if (at::isFloatingType(buffer.scalar_type())) state.push_back(buffer);
    return state;
}

// Every rank takes rank 0's weights and ranges: the same model file gives the same ones, but a
// model initialized differently on one rank would otherwise train apart unnoticed.
inline void broadcast_weights(::torch::jit::Module& model, process_group& group) {
    const std::vector<at::Tensor> state = floating_state(model);
    std::int64_t count = 0;
    for (const at::Tensor& tensor : state) count += tensor.numel();
    for (const std::int64_t other : group.all_gather(count, "comparing model sizes"))
        if (other != count)
            throw error(error_kind::invalid_argument,
                        describe(group.world()) + ": the ranks' prepared models differ (" + std::to_string(count) +
                            " weights and ranges here, " + std::to_string(other) +
                            " on another rank); every rank must train the same model and targets");
    at::Tensor flat = flat_concatenation(state);
    group.broadcast(flat, 0, "broadcasting rank 0's weights");
    copy_back(flat, state);
}

// Every rank must train on the same examples, or the shared batch indices select different ones.
inline void check_same_data(const at::Tensor& images, const at::Tensor& labels, process_group& group) {
    const std::int64_t here[2] = {images.size(0), labels.sum().item<std::int64_t>()};
    const std::vector<std::int64_t> counts = group.all_gather(here[0], "comparing training set sizes");
    const std::vector<std::int64_t> sums = group.all_gather(here[1], "comparing training labels");
    for (std::size_t rank = 0; rank < counts.size(); ++rank)
        if (counts[rank] != here[0] || sums[rank] != here[1])
            throw error(error_kind::invalid_argument,
                        describe(group.world()) + ": rank " + std::to_string(rank) + " has other training data (" +
                            std::to_string(counts[rank]) + " examples, label sum " + std::to_string(sums[rank]) +
                            "; here " + std::to_string(here[0]) + ", " + std::to_string(here[1]) +
                            "); every rank must train on the same data file");
}

// Gradients and the loss averaged over the ranks in one exchange: summed, divided by the size.
inline void average_gradients(const std::vector<at::Tensor>& parameters, double& loss, process_group& group) {
    std::vector<at::Tensor> gradients;
    for (const at::Tensor& parameter : parameters)
        if (parameter.grad().defined()) gradients.push_back(parameter.grad());  // the same ones on every rank
    at::Tensor flat = at::cat({flat_concatenation(gradients), at::full({1}, loss, at::kFloat)});
    group.all_reduce(flat, c10d::ReduceOp::SUM, "averaging gradients");
    flat.div_(static_cast<double>(group.size()));
    copy_back(flat, gradients);
    loss = flat[-1].item<double>();
}

// The ranges of every fake-quantizer, merged as described above.
inline void merge_ranges(const ::torch::jit::Module& model, process_group& group) {
    std::vector<::torch::jit::Module> observing;
    std::vector<at::Tensor> mins, negated_maxs;
    for (const auto& item : model.named_modules()) {
        // Frozen ones too: freeze_observers may stop one after its last update and before this
        // merge, and the MIN of equal ranges is the range.
        if (!detail::class_name_contains(item.value, "versatil.fake_quantize.")) continue;
        observing.push_back(item.value);
        mins.push_back(item.value.attr(observer_state::min_val).toTensor());
        negated_maxs.push_back(-item.value.attr(observer_state::max_val).toTensor());
    }
    if (observing.empty()) return;
    at::Tensor flat = at::cat({flat_concatenation(mins), flat_concatenation(negated_maxs)});
    group.all_reduce(flat, c10d::ReduceOp::MIN, "merging fake-quantize ranges");
    const at::Tensor merged_mins = flat.slice(0, 0, flat.numel() / 2);
    const at::Tensor merged_maxs = -flat.slice(0, flat.numel() / 2);
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < observing.size(); ++i) {
        const at::Tensor old = mins[i];
        const auto range = [&](const at::Tensor& merged) {
            return merged.slice(0, offset, offset + old.numel()).reshape(old.sizes()).to(old.scalar_type()).clone();
        };
        observing[i].setattr(observer_state::min_val, range(merged_mins));
        observing[i].setattr(observer_state::max_val, range(merged_maxs));
        offset += old.numel();
    }
}

}  // namespace detail

// Trains `prepared` (QAT targets) on `images` / `labels`, the same on every rank, across
// `group`; options.training.batch_size is each rank's slice, so the global batch is batch_size
// x group.size(). Every rank ends with the same weights and ranges; any rank may convert them
// (rank 0 writes, by convention).
inline distributed_qat train_qat_distributed(prepared_model& prepared, const at::Tensor& images,
                                             const at::Tensor& labels, process_group& group,
                                             const qat_options& options) {
    distributed_qat result;
    double before = group.communication_seconds();
    detail::check_examples(images, labels, "train_qat_distributed");
    detail::check_same_data(images, labels, group);
    detail::broadcast_weights(prepared.module, group);
    result.start_seconds = group.communication_seconds() - before;

    qat_options sharded = options;
    sharded.training.shard = group.rank();
    sharded.training.shards = group.size();
    sharded.training.after_backward = [&](std::int64_t step, const std::vector<at::Tensor>& parameters, double& loss) {
        const double start = group.communication_seconds();
        detail::average_gradients(parameters, loss, group);
        result.gradient_seconds += group.communication_seconds() - start;
        if (options.training.after_backward) options.training.after_backward(step, parameters, loss);
    };
    sharded.training.on_step = [&](std::int64_t step, double loss) {
        const double start = group.communication_seconds();
        detail::merge_ranges(prepared.module, group);
        result.range_seconds += group.communication_seconds() - start;
        if (options.training.on_step) options.training.on_step(step, loss);
    };
    result.training = train_qat(prepared, images, labels, sharded);
    const std::int64_t slice = std::min(options.training.batch_size * group.size(), images.size(0)) / group.size();
    result.samples_per_rank.assign(static_cast<std::size_t>(group.size()), slice * options.training.steps);
    return result;
}

}  // namespace versatil::libtorch
