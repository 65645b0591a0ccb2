// convert: observers become quantize / dequantize pairs carrying the qparams they learned
// (LibTorch's InsertQuantDeQuant); weights are quantized with their own observers' qparams.
// The result still runs float kernels on dequantized values: lower() packs the weights and
// fuses the pairs into the engine's quantized ops.
#pragma once

#include <torch/csrc/jit/passes/quantization/insert_quant_dequant.h>
#include <torch/script.h>

#include <utility>

#include "versatil/libtorch/passes/clamped_observation.hpp"
#include "versatil/libtorch/passes/float_model_outputs.hpp"
#include "versatil/libtorch/passes/float_unread_values.hpp"
#include "versatil/libtorch/stages/prepare.hpp"

namespace versatil::libtorch {

namespace detail {

inline converted_model convert(prepared_model prepared, bool in_place) {
    try {
        // The observers' own inputs back (clamped_observation.hpp), on the copy unless in place.
        ::torch::jit::Module observed = in_place ? prepared.module : prepared.module.clone();
        restore_observed_values(observed);
        ::torch::jit::Module converted = ::torch::jit::InsertQuantDeQuant(observed, "forward", /*inplace=*/true,
                                                                          /*debug=*/false, prepared.plan.quant_type);
        for (adjustment& layer : leave_model_outputs_float(converted, prepared.plan))
            prepared.adjustments.push_back(std::move(layer));
        for (adjustment& values : leave_unread_values_float(converted, prepared.plan))
            prepared.adjustments.push_back(std::move(values));
        return {std::move(converted), std::move(prepared.plan), std::move(prepared.adjustments),
                std::move(prepared.folded_model)};
    } catch (const std::exception& failure) {
        throw error(error_kind::unsupported_model,
                    "LibTorch cannot insert quantize/dequantize pairs in this model: " + one_line(failure));
    }
}

}  // namespace detail

// The prepared model stays as it was: InsertQuantDeQuant works on a copy of every weight.
inline converted_model convert(const prepared_model& prepared) { return detail::convert(prepared, false); }

// A prepared model handed over is converted in place, without that copy (the stages of
// quantize_model, whose prepared model nothing else reads).
inline converted_model convert(prepared_model&& prepared) { return detail::convert(std::move(prepared), true); }

}  // namespace versatil::libtorch
