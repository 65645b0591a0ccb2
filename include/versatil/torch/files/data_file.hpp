// The data file the CLI reads: a TorchScript module (any file torch::jit::load reads) whose
// tensor attributes are `calib` (calibration samples batched along dim 0), and optionally
// `test` and `test_labels` (held-out samples and their int64 class labels). A model with
// several inputs takes `calib_0`, `calib_1`, ... and `test_0`, `test_1`, ... instead, one per
// forward argument, each batched along dim 0. Saved from Python as a scripted module with
// registered buffers, or from C++ with save_data_file.
#pragma once

#include <torch/script.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "versatil/torch/error.hpp"
#include "versatil/torch/files/file_check.hpp"
#include "versatil/torch/files/save.hpp"

namespace versatil::libtorch {

struct data_file {
    std::optional<at::Tensor> calib;
    std::optional<at::Tensor> test;
    std::optional<at::Tensor> test_labels;
    std::optional<at::Tensor> train_inputs;  // QAT: training samples
    std::optional<at::Tensor> train_labels;  // QAT: their int64 labels
    std::vector<at::Tensor> calib_inputs{};  // calib_0, calib_1, ...: a multi-input model's calibration samples
    std::vector<at::Tensor> test_inputs{};   // test_0, test_1, ...

    // One tensor per forward argument (empty when the file has none).
    std::vector<at::Tensor> calibration() const { return calib ? std::vector<at::Tensor>{*calib} : calib_inputs; }
    std::vector<at::Tensor> evaluation() const { return test ? std::vector<at::Tensor>{*test} : test_inputs; }
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

// `stem`_0, `stem`_1, ... up to the first missing index.
inline std::vector<at::Tensor> numbered_tensors(const ::torch::jit::Module& module, const std::string& stem,
                                                const std::filesystem::path& path) {
    std::vector<at::Tensor> tensors;
    while (auto tensor = tensor_attribute(module, stem + "_" + std::to_string(tensors.size()), path))
        tensors.push_back(*tensor);
    if (!tensors.empty() && module.hasattr(stem))
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' has both '" + stem + "' and '" +
                                                       stem + "_0'; use one (" + stem + "_N for models with several inputs)");
    return tensors;
}
}  // namespace detail

inline data_file load_data_file(const std::filesystem::path& path,
                                compile_source where = compile_source::in_child_process) {
    const ::torch::jit::Module module = load_checked(path, error_kind::invalid_data_file, "data file", where);
    data_file data{detail::tensor_attribute(module, "calib", path), detail::tensor_attribute(module, "test", path),
                   detail::tensor_attribute(module, "test_labels", path),
                   detail::tensor_attribute(module, "train_inputs", path),
                   detail::tensor_attribute(module, "train_labels", path),
                   detail::numbered_tensors(module, "calib", path),
                   detail::numbered_tensors(module, "test", path)};
    // Everything is batched along dim 0: a scalar tensor would make size(0) below throw
    // LibTorch's IndexError instead of this layer's error.
    for (const auto& [name, tensor] : {std::pair{"calib", &data.calib}, std::pair{"test", &data.test},
                                       std::pair{"test_labels", &data.test_labels},
                                       std::pair{"train_inputs", &data.train_inputs},
                                       std::pair{"train_labels", &data.train_labels}})
        if (*tensor && (*tensor)->dim() == 0)
            throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': '" + name +
                                                           "' is a scalar; store samples batched along dim 0");
    for (const auto& [stem, inputs] : {std::pair{"calib", data.calib_inputs}, std::pair{"test", data.test_inputs}})
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i].dim() == 0 || inputs[i].size(0) != inputs[0].size(0))
                throw error(error_kind::invalid_data_file,
                            "data file '" + path.string() + "': '" + stem + "_" + std::to_string(i) + "' has " +
                                (inputs[i].dim() == 0 ? std::string("no batch dimension")
                                                      : std::to_string(inputs[i].size(0)) + " rows") +
                                ", '" + stem + "_0' " + std::to_string(inputs[0].size(0)) +
                                "; every input needs one row per sample");
    const std::vector<at::Tensor> test = data.evaluation();
    if (data.test_labels && test.empty())
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "' has 'test_labels' but no 'test'");
    if (data.test_labels && !test.empty() && data.test_labels->size(0) != test.front().size(0))
        throw error(error_kind::invalid_data_file, "data file '" + path.string() + "': 'test_labels' has " +
                                                       std::to_string(data.test_labels->size(0)) + " rows, 'test' " +
                                                       std::to_string(test.front().size(0)));
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
    for (std::size_t i = 0; i < data.calib_inputs.size(); ++i) add(("calib_" + std::to_string(i)).c_str(), data.calib_inputs[i]);
    for (std::size_t i = 0; i < data.test_inputs.size(); ++i) add(("test_" + std::to_string(i)).c_str(), data.test_inputs[i]);
    module.define("def forward(self):\n    return None\n");
    save_module(module, path, {});
}

}  // namespace versatil::libtorch
