// convert: observers become quantize / dequantize pairs carrying the qparams they learned
// (LibTorch's InsertQuantDeQuant); weights are quantized with their own observers' qparams.
// The result still runs float kernels on dequantized values: lower() packs the weights and
// fuses the pairs into the engine's quantized ops.
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>
#include <torch/script.h>

#include <chrono>

#include "versatil/torch/pipeline/prepare.hpp"

namespace versatil::libtorch {

struct converted_model {
    ::torch::jit::Module module;
    runtime_quantizer quantizer;
    ::torch::jit::QuantType quant_type;
    at::QEngine engine;
    std::vector<adjustment> adjustments;
    double seconds = 0.0;
};

inline converted_model convert(const prepared_model& prepared) {
    const auto start = std::chrono::steady_clock::now();
    ::torch::jit::Module observed = prepared.module;
    ::torch::jit::Module module;
    try {
        module = ::torch::jit::InsertQuantDeQuant(observed, "forward", /*inplace=*/false, /*debug=*/false,
                                                  prepared.quant_type);
    } catch (const std::exception& failure) {
        throw error(error_kind::unsupported_model, "LibTorch cannot insert quantize/dequantize pairs in this model: " +
                                                       first_line(without_backtrace(failure)));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {module, prepared.quantizer, prepared.quant_type, prepared.engine, prepared.adjustments, seconds};
}

}  // namespace versatil::libtorch
