// The one exception type of the LibTorch layer: a kind to branch on and a message that
// names the problem and the fix. LibTorch itself reports through exceptions, so this layer
// does too (the core, which firmware uses, does not).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace versatil::libtorch {

enum class error_kind {
    invalid_argument,          // a bad option, target spec or value given by the caller
    missing_module,            // a target path that names no submodule
    unsupported_device,        // the model lives on a device the backends do not support
    unsupported_composition,   // targets this layer cannot lower together
    no_calibration_data,       // a static target and no batch
    invalid_calibration_data,  // an empty batch, NaN or Inf, a wrong shape or dtype
    invalid_model_file,        // missing, truncated or corrupt TorchScript file
    invalid_data_file,         // a data file without the expected tensors
    io_error,                  // an output that cannot be written
    lowering_failed,           // the engine rejected the converted model
};

constexpr std::string_view to_string(error_kind kind) noexcept {
    switch (kind) {
        case error_kind::invalid_argument: return "invalid_argument";
        case error_kind::missing_module: return "missing_module";
        case error_kind::unsupported_device: return "unsupported_device";
        case error_kind::unsupported_composition: return "unsupported_composition";
        case error_kind::no_calibration_data: return "no_calibration_data";
        case error_kind::invalid_calibration_data: return "invalid_calibration_data";
        case error_kind::invalid_model_file: return "invalid_model_file";
        case error_kind::invalid_data_file: return "invalid_data_file";
        case error_kind::io_error: return "io_error";
        case error_kind::lowering_failed: return "lowering_failed";
    }
    return "unknown";
}

// The first line of a LibTorch error: the rest is a C++ or TorchScript backtrace.
inline std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

class error : public std::runtime_error {
public:
    error(error_kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    error_kind kind() const noexcept { return kind_; }

private:
    error_kind kind_;
};

}  // namespace versatil::libtorch
