// lower: the converted model onto its engine, inside the backends' scoped environment and an
// engine scope (so the process is left as it was, even when lowering throws). LibTorch's
// Finalize packs the weights for the engine, fuses quantize/dequantize pairs with conv and
// linear (and a following relu) into quantized ops, and freezes the module; add + relu is
// then fused into quantized::add_relu. One forward on a sample proves the engine runs it:
// some unsupported configurations only fail there.
#pragma once

#include <torch/csrc/jit/passes/quantization/finalize.h>
#include <torch/csrc/jit/passes/quantization/fusion_passes.h>
#include <torch/script.h>

#include <chrono>
#include <optional>

#include "versatil/torch/calibrate.hpp"
#include "versatil/torch/convert.hpp"
#include "versatil/torch/engine.hpp"

namespace versatil::libtorch {

struct lowered_model {
    ::torch::jit::Module module;  // frozen; run it with engine_scope(engine) active
    runtime_quantizer quantizer;
    at::QEngine engine;
    std::vector<adjustment> adjustments;
    double seconds = 0.0;
};

struct lowering_options {
    std::optional<at::Tensor> sample;  // a batch to prove the lowered model runs
    std::optional<int> threads;
};

inline lowered_model lower(const converted_model& converted, const lowering_options& options = {}) {
    const auto start = std::chrono::steady_clock::now();
    const auto environment = converted.quantizer.environment_context();
    const engine_scope engine(engine_settings{converted.engine, options.threads, std::nullopt});
    ::torch::jit::Module module = converted.module.clone();
    ::torch::jit::Module lowered = ::torch::jit::Finalize(module, converted.quant_type);
    auto graph = lowered.get_method("forward").graph();
    ::torch::jit::FuseQuantizedAddRelu(graph);
    if (options.sample) {
        // On a deep copy (fresh packed weights): oneDNN's quantized conv keeps the primitive
        // of its first input shape, so a check at the sample's batch size would slow every
        // later call at another one.
        const ::torch::NoGradGuard no_grad;
        try {
            lowered.deepcopy().forward({*options.sample});
        } catch (const std::exception& failure) {
            throw error(error_kind::lowering_failed, "the " + engine_name(converted.engine) +
                                                         " engine cannot run the lowered model: " +
                                                         first_line(failure.what()));
        }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {lowered, converted.quantizer, converted.engine, converted.adjustments, seconds};
}

}  // namespace versatil::libtorch
