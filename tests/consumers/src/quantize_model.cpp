// A consumer's LibTorch translation unit: quantize a small TorchScript model (the CLI's
// default CNN + MLP) with a compile-time quantizer and print the report. Fails unless every
// conv and linear op ends up quantized.
#include <torch/script.h>

#include <cstdio>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;

int main() {
    const ::torch::jit::Module model = small_cnn_mlp(1);
    quantize_data data;
    for (int i = 0; i < 4; ++i) data.calibration.emplace_back(::torch::randn({8, 1, 28, 28}));

    using model_quantizer = Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", XNNPACK<per_tensor>>>;
    const quantization_result result = quantize(model, model_quantizer{}, data, {.per_layer = false, .progress = false});
    std::fputs(format_table(result.report).c_str(), stdout);
    return result.report.quantized_ops == result.report.quantizable_ops ? 0 : 1;
}
