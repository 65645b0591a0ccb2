// The one exception type of the LibTorch layer: a kind to branch on and a message that
// names the problem and the fix. LibTorch itself reports through exceptions, so this layer
// does too (the core, which firmware uses, does not).
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace versatil::libtorch {

enum class error_kind {
    invalid_argument,          // a bad option, target spec or value given by the caller
    missing_module,            // a target path that names no submodule
    unsupported_device,        // the model lives on a device the backends do not support
    unsupported_composition,   // targets this layer cannot lower together
    no_calibration_data,       // a static target and no batch
    no_training_data,          // a QAT target and no training samples or labels
    no_evaluation_data,        // nothing to measure the quantized model on
    invalid_calibration_data,  // an empty batch, NaN or Inf, a wrong shape or dtype
    invalid_model_file,        // missing, truncated or corrupt TorchScript file
    invalid_data_file,         // a data file without the expected tensors
    io_error,                  // an output that cannot be written (no space, a size limit)
    lowering_failed,           // the engine rejected the converted model
    unsupported_model,         // the model uses something this LibTorch cannot quantize
    unsupported_export,        // the quantized model uses an op or shape firmware export has no kernel for
    machine_fault,             // the machine, not the input: out of memory, a process killed
    distributed_failure,       // another process of the world never joined, died or stopped answering
    accuracy_target_unmet,     // --min-sqnr / --max-accuracy-drop not reached even with all layers but one in float
    cancelled,                 // the caller asked the run to stop (Ctrl-C in Python); nothing was written
};

constexpr std::string_view to_string(error_kind kind) noexcept {
    switch (kind) {
        case error_kind::invalid_argument: return "invalid_argument";
        case error_kind::missing_module: return "missing_module";
        case error_kind::unsupported_device: return "unsupported_device";
        case error_kind::unsupported_composition: return "unsupported_composition";
        case error_kind::no_calibration_data: return "no_calibration_data";
        case error_kind::no_training_data: return "no_training_data";
        case error_kind::no_evaluation_data: return "no_evaluation_data";
        case error_kind::invalid_calibration_data: return "invalid_calibration_data";
        case error_kind::invalid_model_file: return "invalid_model_file";
        case error_kind::invalid_data_file: return "invalid_data_file";
        case error_kind::io_error: return "io_error";
        case error_kind::lowering_failed: return "lowering_failed";
        case error_kind::unsupported_model: return "unsupported_model";
        case error_kind::unsupported_export: return "unsupported_export";
        case error_kind::machine_fault: return "machine_fault";
        case error_kind::distributed_failure: return "distributed_failure";
        case error_kind::accuracy_target_unmet: return "accuracy_target_unmet";
        case error_kind::cancelled: return "cancelled";
    }
    return "unknown";
}

class error : public std::runtime_error {
public:
    error(error_kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    error_kind kind() const noexcept { return kind_; }

private:
    error_kind kind_;
};

namespace detail {

// The line of a LibTorch error that says what went wrong, without the C++ or TorchScript
// backtrace around it: the first line that says something (TorchScript's start blank), with
// the next when it ends in ':' (a schema, then what is wrong with the call); for an error
// inside the TorchScript interpreter, whose first line only says that, the last line (the
// exception it raised).
inline std::string first_line(const std::string& message) {
    const auto line_at = [&](std::size_t from) {
        const std::size_t start = std::min(message.find_first_not_of("\n \t", from), message.size());
        const std::size_t end = std::min(message.find('\n', start), message.size());
        return std::pair{message.substr(start, end - start), end};
    };
    const auto [first, end] = line_at(0);
    if (first == "The following operation failed in the TorchScript interpreter.") {
        const std::size_t last_end = message.find_last_not_of("\n \t");
        const std::size_t last_start = message.rfind('\n', last_end) + 1;  // 0 when it is the first line (npos + 1)
        return message.substr(last_start, last_end - last_start + 1);
    }
    if (first.empty() || first.back() != ':') return first;
    return first + " " + line_at(end).first;
}

// A LibTorch exception's message without the C++ backtrace c10::Error appends.
inline std::string without_backtrace(const std::exception& failure) {
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&failure)) return c10_error->what_without_backtrace();
    return failure.what();
}

}  // namespace detail

// The one line of an exception from LibTorch that says what went wrong (detail::first_line of
// its message without the backtrace): what every error of this layer quotes.
inline std::string one_line(const std::exception& failure) {
    return detail::first_line(detail::without_backtrace(failure));
}

}  // namespace versatil::libtorch
