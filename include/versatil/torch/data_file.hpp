// The data file the CLI reads: a TorchScript module (any file torch::jit::load reads) whose
// tensor attributes are `calib` (calibration samples batched along dim 0), and optionally
// `test` and `test_labels` (held-out samples and their int64 class labels). Saved from Python
// as a scripted module with registered buffers, or from C++ with save_data_file.
#pragma once

#include <torch/script.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "versatil/torch/error.hpp"
#include "versatil/torch/file_check.hpp"
#include "versatil/torch/save.hpp"

namespace versatil::libtorch {

struct data_file {
    std::optional<at::Tensor> calib;
    std::optional<at::Tensor> test;
    std::optional<at::Tensor> test_labels;
    std::optional<at::Tensor> train_inputs;  // QAT: training samples
    std::optional<at::Tensor> train_labels;  // QAT: their int64 labels
};

namespace detail {
inline std::optional<at::Tensor> tensor_attribute(const ::torch::jit::Module& module, const std::string& name,
                                                  const std::filesystem::path& path) {
    if (!module.hasattr(name)) return std::nullopt;
    const c10::IValue value = module.attr(name);
    if (!value.isTensor())
        throw error(error_kind::invalid_data_file,
                    "data file '" + path.string() + "': attribute '" + name + "' is not a tensor");
    return value.toTensor();
}
}  // namespace detail

inline data_file load_data_file(const std::filesystem::path& path,
                                compile_source where = compile_source::in_child_process) {
    const ::torch::jit::Module module = load_checked(path, error_kind::invalid_data_file, "data file", where);
    data_file data{detail::tensor_attribute(module, "calib", path), detail::tensor_attribute(module, "test", path),
                   detail::tensor_attribute(module, "test_labels", path),
                   detail::tensor_attribute(module, "train_inputs", path),
                   detail::tensor_attribute(module, "train_labels", path)};
    // Everything is batched along dim 0: a scalar tensor would make size(0) below throw
    // LibTorch's IndexError instead of this layer's error.
    for (const auto& [name, tensor] : {std::pair{"calib", &data.calib}, std::pair{"test", &data.test},
                                       std::pair{"test_labels", &data.test_labels},
                                       std::pair{"train_inputs", &data.train_inputs},
                                       std::pair{"train_labels", &data.train_labels}})
        if (*tensor && (*tensor)->dim() == 0)
            throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': '" + name +
                                                           "' is a scalar; store samples batched along dim 0");
    if (data.test_labels && !data.test)
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' has 'test_labels' but no 'test'");
    if (data.test_labels && data.test && data.test_labels->size(0) != data.test->size(0))
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': 'test_labels' has " +
                                                       std::to_string(data.test_labels->size(0)) + " rows, 'test' " +
                                                       std::to_string(data.test->size(0)));
    for (const auto* labels : {&data.test_labels, &data.train_labels})
        if (*labels && (*labels)->scalar_type() != at::kLong)
            throw error(error_kind::invalid_data_file,
                        "data file '" + path.string() + "': labels must be int64 class indices");
    return data;
}

// Writes tensors as a data file (a module with one buffer per tensor), whole or not at all.
inline void save_data_file(const data_file& data, const std::filesystem::path& path) {
    ::torch::jit::Module module(c10::QualifiedName("__torch__.versatil.DataFile"));
    const auto add = [&module](const char* name, const std::optional<at::Tensor>& tensor) {
        if (tensor) module.register_buffer(name, *tensor);
    };
    add("calib", data.calib);
    add("test", data.test);
    add("test_labels", data.test_labels);
    add("train_inputs", data.train_inputs);
    add("train_labels", data.train_labels);
    module.define("def forward(self):\n    return None\n");
    save_module(module, path, {});
}

}  // namespace versatil::libtorch
