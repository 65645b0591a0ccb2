// What flows through a model: a batch is one forward call's inputs (a tensor per argument,
// each with the same samples along dim 0), and a model's outputs are the tensors of whatever
// it returns (a tensor, or tuples, lists and dicts of them), each named by where it sits.
#pragma once

#include <torch/script.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

class batch {
public:
    batch(at::Tensor input) : inputs_{std::move(input)} {}  // NOLINT: a single-input model's batch is its tensor
    explicit batch(std::vector<at::Tensor> inputs) : inputs_(std::move(inputs)) {
        if (inputs_.empty()) throw error(error_kind::invalid_argument, "a batch needs at least one input tensor");
    }

    const std::vector<at::Tensor>& inputs() const noexcept { return inputs_; }
    const at::Tensor& input(std::size_t i = 0) const { return inputs_.at(i); }
    std::size_t arity() const noexcept { return inputs_.size(); }
    std::int64_t samples() const { return inputs_.front().dim() == 0 ? 1 : inputs_.front().size(0); }

    // The arguments of one forward call.
    std::vector<c10::IValue> arguments() const { return {inputs_.begin(), inputs_.end()}; }

    // Rows [start, end) of every input.
    batch rows(std::int64_t start, std::int64_t end) const {
        std::vector<at::Tensor> sliced;
        for (const at::Tensor& input : inputs_) sliced.push_back(input.slice(0, start, end));
        return batch(std::move(sliced));
    }

private:
    std::vector<at::Tensor> inputs_;
};

// The rows per batch that samples given batched along dim 0 are split into, by the CLI (a data
// file's tensors) and by the Python module (a tensor) alike: observers such as the histogram's
// depend on the split, so one number makes the same data give the same figures from either.
inline constexpr std::int64_t default_batch_rows = 32;

// Splits inputs batched along dim 0 (one tensor per forward argument, all with the same
// number of samples) into batches of at most `batch_size` rows.
inline std::vector<batch> split_batches(const std::vector<at::Tensor>& inputs, std::int64_t batch_size) {
    if (inputs.empty() || !inputs.front().defined() || inputs.front().dim() == 0) return {};
    const std::int64_t samples = inputs.front().size(0);
    for (std::size_t i = 1; i < inputs.size(); ++i)
        if (inputs[i].dim() == 0 || inputs[i].size(0) != samples)
            throw error(error_kind::invalid_calibration_data,
                        "input " + std::to_string(i) + " has " +
                            (inputs[i].dim() == 0 ? std::string("no batch dimension")
                                                  : std::to_string(inputs[i].size(0)) + " samples") +
                            ", input 0 has " + std::to_string(samples) + "; every input needs one row per sample");
    const batch all{std::vector<at::Tensor>(inputs)};
    std::vector<batch> batches;
    for (std::int64_t start = 0; start < samples; start += batch_size)
        batches.push_back(all.rows(start, std::min(start + batch_size, samples)));
    return batches;
}

inline std::vector<batch> split_batches(const at::Tensor& data, std::int64_t batch_size) {
    return split_batches(std::vector<at::Tensor>{data}, batch_size);
}

// How many samples `batches` hold in all.
inline std::int64_t samples_in(const std::vector<batch>& batches) {
    std::int64_t samples = 0;
    for (const batch& inputs : batches) samples += inputs.samples();
    return samples;
}

// The first of `batches` up to `max_samples` samples in all (whole batches, at least one): what
// the accuracy steps measure on, one forward per layer (bias correction) or per batch (GPTQ).
inline std::vector<batch> leading_batches(const std::vector<batch>& batches, std::int64_t max_samples) {
    std::vector<batch> leading;
    std::int64_t samples = 0;
    for (const batch& inputs : batches) {
        if (!leading.empty() && samples + inputs.samples() > max_samples) break;
        leading.push_back(inputs);
        samples += inputs.samples();
    }
    return leading;
}

// Every input of every batch, concatenated along dim 0: one tensor per forward argument.
inline std::vector<at::Tensor> concatenate(const std::vector<batch>& batches) {
    std::vector<at::Tensor> inputs;
    for (std::size_t i = 0; i < batches.front().arity(); ++i) {
        std::vector<at::Tensor> parts;
        for (const batch& b : batches) parts.push_back(b.input(i));
        inputs.push_back(at::cat(parts));
    }
    return inputs;
}

// One tensor a model returned, with its place in the output: "" for a lone tensor, "0", "1"
// for tuple and list items, the key for dict items, joined by '.' when nested.
struct named_output {
    std::string name;
    at::Tensor tensor;
};

namespace detail {
inline void flatten_output(const c10::IValue& value, const std::string& name, std::vector<named_output>& out) {
    const auto child = [&](const std::string& key) { return name.empty() ? key : name + "." + key; };
    if (value.isTensor()) {
        out.push_back({name, value.toTensor()});
    } else if (value.isTuple()) {
        const auto& items = value.toTupleRef().elements();
        for (std::size_t i = 0; i < items.size(); ++i) flatten_output(items[i], child(std::to_string(i)), out);
    } else if (value.isList()) {
        const c10::List<c10::IValue> items = value.toList();
        for (std::size_t i = 0; i < items.size(); ++i) flatten_output(items.get(i), child(std::to_string(i)), out);
    } else if (value.isGenericDict()) {
        for (const auto& item : value.toGenericDict()) {
            const c10::IValue& key = item.key();
            const std::string text = key.isString() ? key.toStringRef() : key.isInt() ? std::to_string(key.toInt())
                                                                                     : key.tagKind();
            flatten_output(item.value(), child(text), out);
        }
    }
    // None, numbers and strings carry no quantization error: they are not compared.
}

inline std::string describe_shape(const at::Tensor& tensor) {
    std::string text = "[";
    for (std::int64_t i = 0; i < tensor.dim(); ++i) text += (i ? ", " : "") + std::to_string(tensor.size(i));
    return text + "] " + std::string(c10::toString(tensor.scalar_type()));
}

inline std::string describe_shape(const batch& inputs) {
    std::string text;
    for (const at::Tensor& input : inputs.inputs()) text += (text.empty() ? "" : ", ") + describe_shape(input);
    return text;
}
}  // namespace detail

// The data a quantization runs on (stages/sequence.hpp).
struct quantize_data {
    std::vector<batch> calibration{};               // batches; static targets need at least one
    std::vector<batch> evaluation{};                // held-out batches; calibration data when empty
    std::optional<at::Tensor> evaluation_labels{};  // int64 class labels for every evaluation sample
    std::optional<at::Tensor> train_inputs{};       // QAT: training samples, batched along dim 0
    std::optional<at::Tensor> train_labels{};       // QAT: their int64 class labels
};

// The tensors in a model's output, in a fixed order.
inline std::vector<named_output> flatten_output(const c10::IValue& output) {
    std::vector<named_output> tensors;
    detail::flatten_output(output, "", tensors);
    if (tensors.empty())
        throw error(error_kind::unsupported_model,
                    "the model's forward returns " + output.tagKind() + " with no tensor in it: nothing to compare");
    return tensors;
}

}  // namespace versatil::libtorch
