// convert: observers become quantize / dequantize pairs carrying the qparams they learned
// (LibTorch's InsertQuantDeQuant); weights are quantized with their own observers' qparams.
// The result still runs float kernels on dequantized values: lower() packs the weights and
// fuses the pairs into the engine's quantized ops.
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>
#include <torch/script.h>

#include "versatil/libtorch/pipeline/prepare.hpp"

namespace versatil::libtorch {

inline converted_model convert(const prepared_model& prepared) {
    ::torch::jit::Module observed = prepared.module;
    try {
        return {::torch::jit::InsertQuantDeQuant(observed, "forward", /*inplace=*/false, /*debug=*/false,
                                                 prepared.plan.quant_type),
                prepared.plan, prepared.adjustments, prepared.float_model};
    } catch (const std::exception& failure) {
        throw error(error_kind::unsupported_model,
                    "LibTorch cannot insert quantize/dequantize pairs in this model: " + one_line(failure));
    }
}

}  // namespace versatil::libtorch
