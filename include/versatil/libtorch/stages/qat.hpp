// Quantization-aware training: a model prepared for QAT targets (fake-quantize modules in
// place of observers, see fake_quantize.hpp) trained in C++ with torch::optim, then
// converted and lowered like a calibrated one.
//
// Batch norm is folded into the preceding convolution before fake-quantize modules are
// placed, not kept trainable and folded at convert. Folding later would quantize weights at
// convert with scales training never saw (the fold rescales every output channel), which is
// why PyTorch needs fused ConvBn QAT modules that simulate the fold; folding first makes the
// trained weights exactly the deployed ones, at the cost of batch-norm statistics that no
// longer move, which QAT recipes freeze after a few epochs anyway. Batch norms that follow no
// convolution stay, and freeze_batch_norm_statistics stops their running statistics.
#pragma once

#include <torch/script.h>

#include <chrono>
#include <string>

#include "versatil/libtorch/stages/prepare.hpp"
#include "versatil/libtorch/torchscript/progress.hpp"
#include "versatil/libtorch/stages/training.hpp"

namespace versatil::libtorch {

// Stops every fake-quantize module from moving its range; quantization stays simulated.
inline void freeze_observers(::torch::jit::Module& model) {
    for (const auto& item : model.named_modules())
        if (detail::class_name_contains(item.value, "versatil.fake_quantize."))
            ::torch::jit::Module(item.value).setattr("observer_enabled", false);
}

// Stops batch-norm running statistics (the modules switch to eval mode and stay there while
// the rest of the model trains).
inline void freeze_batch_norm_statistics(::torch::jit::Module& model) {
    for (const auto& item : model.named_modules())
        if (detail::class_name_contains(item.value, "torch.nn.modules.batchnorm."))
            ::torch::jit::Module(item.value).train(false);
}

struct qat_options {
    // Fine-tuning a trained model: a tenth of training's learning rate. `training.on_step` is
    // called after every step, as in train_classifier.
    training_options training{.steps = 300, .batch_size = 64, .learning_rate = 1e-4};
    std::int64_t freeze_observers_after = -1;   // step after which ranges stop moving; -1 never
    std::int64_t freeze_batch_norm_after = -1;  // step after which batch-norm statistics stop; -1 never
    bool progress = true;                       // a bar with steps and loss, on a terminal
};

struct qat_result {
    training_result training;
    double seconds = 0.0;
};

// Trains a model prepared for QAT targets with cross-entropy on its logits.
inline qat_result train_qat(prepared_model& prepared, const at::Tensor& images, const at::Tensor& labels,
                            const qat_options& options) {
    if (!prepared.plan.quantizer.is_qat())
        throw error(error_kind::invalid_argument,
                    "train_qat: the model was prepared for post-training quantization; give its targets the qat "
                    "option to train it");
    const auto start = std::chrono::steady_clock::now();
    progress_bar bar("training", options.training.steps, options.progress);
    training_options training = options.training;
    training.on_step = [&](std::int64_t step, double loss) {
        if (step + 1 == options.freeze_observers_after) freeze_observers(prepared.module);
        if (step + 1 == options.freeze_batch_norm_after) freeze_batch_norm_statistics(prepared.module);
        char suffix[48];
        std::snprintf(suffix, sizeof suffix, "loss %.4f", loss);
        bar.update(step + 1, suffix);
        if (options.training.on_step) options.training.on_step(step, loss);
    };
    qat_result result;
    result.training = train_classifier(prepared.module, images, labels, training);
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

}  // namespace versatil::libtorch
