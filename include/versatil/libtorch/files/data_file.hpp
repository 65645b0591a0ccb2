// The data file the CLI reads: a dict of tensors written by torch.save, or a TorchScript module
// (any file torch::jit::load reads) whose tensor attributes are named as the dict's keys:
// `calib` (calibration samples batched along dim 0), and optionally
// `test` and `test_labels` (held-out samples and their int64 class labels). A model with
// several inputs takes `calib_0`, `calib_1`, ... and `test_0`, `test_1`, ... instead, one per
// forward argument, each batched along dim 0. Saved from Python as a scripted module with
// registered buffers, or from C++ with save_data_file. A tensor of any other name is an error.
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/files/file_check.hpp"
#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/files/saved_tensors.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"

namespace versatil::libtorch {

// A data file's contents under the library's names (the file's own tensor names in quotes).
struct data_file {
    std::vector<at::Tensor> calibration{};          // 'calib', or 'calib_0', 'calib_1', ...: one per forward argument
    std::vector<at::Tensor> evaluation{};           // 'test', or 'test_0', 'test_1', ...
    std::optional<at::Tensor> evaluation_labels{};  // 'test_labels': int64 class labels of the evaluation samples
    std::optional<at::Tensor> train_inputs{};       // 'train_inputs': QAT training samples
    std::optional<at::Tensor> train_labels{};       // 'train_labels': their int64 labels
};

namespace detail {
inline std::optional<at::Tensor> tensor_attribute(const named_values& entries, const std::string& name,
                                                  const std::filesystem::path& path) {
    const auto found = std::ranges::find(entries, name, &named_values::value_type::first);
    if (found == entries.end()) return std::nullopt;
    const c10::IValue& value = found->second;
    if (!value.isTensor())
        throw error(error_kind::invalid_data_file,
                    "data file '" + path.string() + "': '" + name + "' is not a tensor but " + python_kind(value));
    // Everything is batched along dim 0: a scalar would make size(0) throw LibTorch's IndexError.
    if (value.toTensor().dim() == 0)
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': '" + name +
                                                       "' is a scalar; store samples batched along dim 0");
    return value.toTensor();
}

// The inputs stored as `stem` (one) or `stem`_0, `stem`_1, ... (one per forward argument, up
// to the first missing index), each with one row per sample.
inline std::vector<at::Tensor> inputs_named(const named_values& entries, const std::string& stem,
                                            const std::filesystem::path& path) {
    std::vector<at::Tensor> inputs;
    while (auto tensor = tensor_attribute(entries, stem + "_" + std::to_string(inputs.size()), path))
        inputs.push_back(*tensor);
    if (!inputs.empty() && std::ranges::find(entries, stem, &named_values::value_type::first) != entries.end())
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' has both '" + stem + "' and '" +
                                                       stem + "_0'; use one (" + stem +
                                                       "_N for models with several inputs)");
    for (std::size_t i = 1; i < inputs.size(); ++i)
        if (inputs[i].size(0) != inputs[0].size(0))
            throw error(error_kind::invalid_data_file,
                        "data file '" + path.string() + "': '" + stem + "_" + std::to_string(i) + "' has " +
                            std::to_string(inputs[i].size(0)) + " rows, '" + stem + "_0' " +
                            std::to_string(inputs[0].size(0)) + "; every input needs one row per sample");
    if (inputs.empty())
        if (auto single = tensor_attribute(entries, stem, path)) inputs.push_back(*single);
    return inputs;
}

// What each name a data file may hold is for, as the error for a name it may not says.
inline constexpr std::string_view data_file_names =
    "'calib' calibration samples, batched along dim 0 ('calib_0', 'calib_1', ... for a model with several inputs, "
    "one per forward argument); 'test' held-out samples the report measures accuracy on ('test_0', ...); "
    "'test_labels' their int64 class labels, for top-1; 'train_inputs' and 'train_labels' QAT training samples and "
    "their int64 labels";

inline bool is_data_file_name(std::string_view name) {
    for (const std::string_view fixed : {"calib", "test", "test_labels", "train_inputs", "train_labels"})
        if (name == fixed) return true;
    for (const std::string_view stem : {"calib_", "test_"})
        if (name.starts_with(stem) && name.size() > stem.size() &&
            std::ranges::all_of(name.substr(stem.size()), [](char c) { return c >= '0' && c <= '9'; }))
            return true;
    return false;
}

// Refuses a tensor under a name versatil does not read: a misspelt 'calib' would otherwise be
// dropped in silence and the run fail later for want of calibration data.
inline void require_known_names(const named_values& entries, const std::filesystem::path& path) {
    std::string unknown, held;
    for (const auto& [name, value] : entries) {
        if (!value.isTensor()) continue;
        held += (held.empty() ? "'" : ", '") + name + "' " + describe_shape(value.toTensor());
        if (!is_data_file_name(name)) unknown += (unknown.empty() ? "'" : ", '") + name + "'";
    }
    if (!unknown.empty())
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' holds " + unknown +
                                                       ", a name versatil does not read. It holds " + held +
                                                       ". The names it reads: " + std::string(data_file_names));
}

// A data file's values by name: a torch.save dict's entries (tensors only), or a TorchScript
// module's attributes.
inline named_values data_file_entries(const std::filesystem::path& path, compile_source where) {
    constexpr error_kind kind = error_kind::invalid_data_file;
    if (is_torch_save_archive(check_archive(path, kind, "data file"))) {
        named_values entries = load_saved_dict(path, kind, "data file");
        for (const auto& [name, value] : entries)
            if (!value.isTensor())
                throw error(kind, "data file '" + path.string() + "': '" + name + "' holds " + python_kind(value) +
                                      "; every value of a data file is a tensor, its samples batched along dim 0");
        return entries;
    }
    const ::torch::jit::Module module = detail::load_checked_archive(path, kind, "data file", where);
    named_values entries;
    for (const auto& attribute : module.named_attributes(/*recurse=*/false))
        if (attribute.name != "training" && !attribute.value.isObject())
            entries.emplace_back(attribute.name, attribute.value);
    return entries;
}
}  // namespace detail

// Reads a data file in either form: a dict of tensors written by torch.save, or a TorchScript
// module (torch.jit.save, save_data_file) whose attributes are the tensors.
inline data_file load_data_file(const std::filesystem::path& path,
                                compile_source where = compile_source::in_child_process) {
    const named_values entries = detail::data_file_entries(path, where);
    detail::require_known_names(entries, path);
    data_file data{detail::inputs_named(entries, "calib", path), detail::inputs_named(entries, "test", path),
                   detail::tensor_attribute(entries, "test_labels", path),
                   detail::tensor_attribute(entries, "train_inputs", path),
                   detail::tensor_attribute(entries, "train_labels", path)};
    if (data.evaluation_labels && data.evaluation.empty())
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' has 'test_labels' but no 'test'");
    if (data.evaluation_labels && data.evaluation_labels->size(0) != data.evaluation.front().size(0))
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': 'test_labels' has " +
                                                       std::to_string(data.evaluation_labels->size(0)) +
                                                       " rows, 'test' " +
                                                       std::to_string(data.evaluation.front().size(0)));
    for (const auto* labels : {&data.evaluation_labels, &data.train_labels})
        if (*labels && (*labels)->scalar_type() != at::kLong)
            throw error(error_kind::invalid_data_file,
                        "data file '" + path.string() + "': labels must be int64 class indices");
    if (!data.calibration.empty() && data.calibration.front().size(0) == 0)
        throw error(error_kind::invalid_calibration_data,
                    "data file '" + path.string() + "': 'calib' (" + detail::describe_shape(data.calibration.front()) +
                        ") holds no sample; give calibration samples batched along dim 0");
    return data;
}

// The batches quantize() takes from a data file, at most `rows` samples each.
inline quantize_data batches_of(const data_file& file, std::int64_t rows) {
    return {split_batches(file.calibration, rows), split_batches(file.evaluation, rows), file.evaluation_labels,
            file.train_inputs, file.train_labels};
}

// Writes tensors as a data file (a module with one buffer per tensor), whole or not at all.
inline void save_data_file(const data_file& data, const std::filesystem::path& path) {
    ::torch::jit::Module module(c10::QualifiedName("__torch__.versatil.DataFile"));
    const auto add = [&module](const std::string& name, const std::optional<at::Tensor>& tensor) {
        if (tensor) module.register_buffer(name, *tensor);
    };
    const auto add_inputs = [&add](const std::string& stem, const std::vector<at::Tensor>& inputs) {
        for (std::size_t i = 0; i < inputs.size(); ++i)
            add(inputs.size() == 1 ? stem : stem + "_" + std::to_string(i), inputs[i]);
    };
    add_inputs("calib", data.calibration);
    add_inputs("test", data.evaluation);
    add("test_labels", data.evaluation_labels);
    add("train_inputs", data.train_inputs);
    add("train_labels", data.train_labels);
    module.define("def forward(self):\n    return None\n");
    save_module(module, path, {});
}

}  // namespace versatil::libtorch
