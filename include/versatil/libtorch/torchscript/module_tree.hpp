// Walking a TorchScript module by dotted path: finding a target's submodule (with an error
// that lists what does exist), listing every path, and telling which devices a model's
// tensors live on.
#pragma once

#include <torch/script.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "versatil/core/device.hpp"
#include "versatil/core/runtime_quantizer.hpp"
#include "versatil/libtorch/error.hpp"

namespace versatil::libtorch {

namespace detail {
// Whether the module's class name (mangled or not) contains `part`: "torch.nn.modules.conv.".
inline bool class_name_contains(const ::torch::jit::Module& module, std::string_view part) {
    return module.type()->name() && module.type()->name()->qualifiedName().find(part) != std::string::npos;
}
}  // namespace detail

inline std::optional<::torch::jit::Module> child_named(const ::torch::jit::Module& module, std::string_view name) {
    for (const auto& child : module.named_children())
        if (child.name == name) return child.value;
    return std::nullopt;
}

inline std::string child_names(const ::torch::jit::Module& module) {
    std::string names;
    for (const auto& child : module.named_children()) names += (names.empty() ? "'" : ", '") + child.name + "'";
    return names.empty() ? "none" : names;
}

// The submodule at `path` ("" = the model itself), or an error naming the deepest existing
// prefix and the children available there.
inline ::torch::jit::Module find_submodule(const ::torch::jit::Module& model, std::string_view path) {
    ::torch::jit::Module current = model;
    std::string reached;
    std::string_view rest = path;
    while (!rest.empty()) {
        const std::size_t dot = rest.find('.');
        const std::string_view name = rest.substr(0, dot);
        const std::optional<::torch::jit::Module> child = child_named(current, name);
        if (!child) {
            const std::string where = reached.empty() ? "the model" : "'" + reached + "'";
            throw error(error_kind::missing_module, "module path '" + std::string(path) + "' does not exist: " + where +
                                                        " has no child '" + std::string(name) +
                                                        "'; its children are " + child_names(current));
        }
        current = *child;
        reached += (reached.empty() ? "" : ".") + std::string(name);
        rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    return current;
}

// Every submodule's dotted path ("features.0", "classifier.fc1"), parents before children in
// registration order; the model itself ("") is not listed.
inline std::vector<std::string> module_paths(const ::torch::jit::Module& model) {
    std::vector<std::string> paths;
    for (const auto& item : model.named_modules())
        if (!item.name.empty()) paths.push_back(item.name);
    return paths;
}

inline std::optional<device_type> to_device_type(c10::DeviceType type) {
    switch (type) {
        case c10::DeviceType::CPU: return device_type::cpu;
        case c10::DeviceType::CUDA: return device_type::cuda;
        case c10::DeviceType::MPS: return device_type::mps;
        case c10::DeviceType::XPU: return device_type::xpu;
        case c10::DeviceType::HIP: return device_type::hip;
        case c10::DeviceType::Meta: return device_type::meta;
        default: return std::nullopt;
    }
}

// The device types of the model's parameters and buffers (cpu for a model with none).
inline device_set model_devices(const ::torch::jit::Module& model, std::string* unknown = nullptr) {
    device_set devices;
    bool any = false;
    const auto note = [&](const at::Tensor& tensor) {
        if (!tensor.defined()) return;
        any = true;
        if (const auto type = to_device_type(tensor.device().type()))
            devices = devices | device_set{*type};
        else if (unknown)
            *unknown = c10::DeviceTypeName(tensor.device().type(), true);
    };
    for (const at::Tensor& parameter : model.parameters()) note(parameter);
    for (const at::Tensor& buffer : model.buffers()) note(buffer);
    return any ? devices : device_set{device_type::cpu};
}

// Makes every parameter a fresh leaf tensor, trainable or not. Module::clone and
// FoldConvBatchNorm compute parameters from the old ones, so with autograd on they come back
// as non-leaf tensors that an optimizer cannot update.
inline void reset_parameters(::torch::jit::Module& model, bool trainable) {
    for (const auto& item : model.named_modules()) {
        ::torch::jit::Module module = item.value;
        for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
            if (parameter.value.is_leaf())
                parameter.value.requires_grad_(trainable);  // keeps the tensor others may hold
            else
                module.setattr(parameter.name, parameter.value.detach().requires_grad_(trainable));
        }
    }
}

// Checks that every target path names a submodule and that the model lives on a device of
// `supported` (where LibTorch runs the quantized model: the plan's devices).
inline void check_model_fits(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                             device_set supported) {
    for (const runtime_target& target : quantizer.targets()) (void)find_submodule(model, target.path);
    std::string unknown;
    const device_set devices = model_devices(model, &unknown);
    if (!unknown.empty())
        throw error(error_kind::unsupported_device, "the model has tensors on device '" + unknown +
                                                        "', which no versatil backend supports; move it to cpu");
    devices.for_each([&](device_type device) {
        if (supported.contains(device)) return;
        std::string names;
        supported.for_each([&](device_type d) { names += (names.empty() ? "" : ", ") + std::string(to_string(d)); });
        throw error(error_kind::unsupported_device, "the model has tensors on '" + std::string(to_string(device)) +
                                                        "', but its backends support only: " + names +
                                                        "; move the model there first (model.to(...))");
    });
}

}  // namespace versatil::libtorch
