// Whole image classifiers built from the torch.nn-named blocks of modules.hpp. They are what the
// quantization layer is tested on and what the CLI embeds. Each model takes Fashion-MNIST shaped
// input [N, 1, 28, 28], returns logits [N, 10], is deterministic for a seed and comes back in eval
// mode. Together they cover the module kinds the backends treat differently: conv+bn+relu chains,
// linear-heavy networks, residual adds, depthwise convolutions and attention built from linears.
// Train them with training.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "versatil/libtorch/error.hpp"
#include "versatil/libtorch/demo/modules.hpp"

namespace versatil::libtorch {

inline constexpr int64_t fashion_mnist_classes = 10;
inline constexpr const char* versatil_model_prefix = "__torch__.versatil.models.";

// The CLI's embedded default, a small CNN with an MLP head (about 210 k parameters).
//   features      Sequential
//     features.0  Conv2d(1, 16, 3, padding=1)     features.4  Conv2d(16, 32, 3, padding=1)
//     features.1  BatchNorm2d(16)                 features.5  BatchNorm2d(32)
//     features.2  ReLU                            features.6  ReLU
//     features.3  MaxPool2d(2)    -> 16x14x14     features.7  MaxPool2d(2)    -> 32x7x7
//   classifier    (flatten, fc1, relu, fc2)
//     classifier.flatten  Flatten
//     classifier.fc1      Linear(1568, 128)
//     classifier.relu     ReLU
//     classifier.fc2      Linear(128, 10)
inline ::torch::jit::Module small_cnn_mlp(uint64_t seed) {
    using detail::mix_seed;
    auto features = sequential({conv2d(1, 16, 3, mix_seed(seed, 0), {.padding = 1}), batch_norm2d(16), relu(),
                                max_pool2d(2), conv2d(16, 32, 3, mix_seed(seed, 1), {.padding = 1}), batch_norm2d(32),
                                relu(), max_pool2d(2)});
    auto classifier = named_chain(std::string(versatil_model_prefix) + "SmallCnnMlpClassifier",
                                  {{"flatten", flatten()},
                                   {"fc1", linear(32 * 7 * 7, 128, mix_seed(seed, 2))},
                                   {"relu", relu()},
                                   {"fc2", linear(128, fashion_mnist_classes, mix_seed(seed, 3))}});
    auto model = named_chain(std::string(versatil_model_prefix) + "SmallCnnMlp",
                             {{"features", features}, {"classifier", classifier}});
    model.eval();
    return model;
}

// A linear-heavy MLP: `depth` hidden Linear+ReLU layers of width `hidden`.
//   flatten       Flatten                          -> 784
//   layers        Sequential
//     layers.0    Linear(784, hidden)    layers.1  ReLU
//     layers.2    Linear(hidden, hidden) layers.3  ReLU      ... (2 * depth children)
//   head          Linear(hidden, 10)
inline ::torch::jit::Module mlp(uint64_t seed, int64_t hidden = 256, int64_t depth = 3) {
    detail::require(hidden > 0 && depth > 0, "mlp: hidden and depth must be positive");
    std::vector<::torch::jit::Module> layers;
    for (int64_t layer = 0; layer < depth; ++layer) {
        layers.push_back(
            linear(layer == 0 ? 28 * 28 : hidden, hidden, detail::mix_seed(seed, static_cast<uint64_t>(layer))));
        layers.push_back(relu());
    }
    auto model = named_chain(std::string(versatil_model_prefix) + "Mlp",
                             {{"flatten", flatten()},
                              {"layers", sequential(layers)},
                              {"head", linear(hidden, fashion_mnist_classes, detail::mix_seed(seed, 1000))}});
    model.eval();
    return model;
}

// A small ResNet: a conv-bn-relu stem, `blocks` residual blocks at 16 channels (28x28), then
// `blocks` at 32 channels whose first one halves the resolution (14x14) through a projected
// shortcut, global average pooling and a linear head.
//   stem          Sequential: stem.0 Conv2d(1, 16, 3, padding=1, bias=False), stem.1 BatchNorm2d, stem.2 ReLU
//   layer1        Sequential of ResidualBlock(16 -> 16)
//     layer1.<i>.conv1 / bn1 / relu / conv2 / bn2 / add_relu
//   layer2        Sequential of ResidualBlock; layer2.0 is 16 -> 32, stride 2, with
//     layer2.0.downsample.0 Conv2d(16, 32, 1, stride=2, bias=False), layer2.0.downsample.1 BatchNorm2d
//   pool          AdaptiveAvgPool2d(1)
//   flatten       Flatten
//   fc            Linear(32, 10)
inline ::torch::jit::Module resnet_cnn(uint64_t seed, int64_t blocks = 2) {
    detail::require(blocks > 0, "resnet_cnn: blocks must be positive");
    using detail::mix_seed;
    std::vector<::torch::jit::Module> layer1;
    std::vector<::torch::jit::Module> layer2;
    for (int64_t block = 0; block < blocks; ++block) {
        const auto index = static_cast<uint64_t>(block);
        layer1.push_back(residual_block(16, 16, mix_seed(seed, 100 + index)));
        layer2.push_back(residual_block(block == 0 ? 16 : 32, 32, mix_seed(seed, 200 + index), block == 0 ? 2 : 1));
    }
    auto model = named_chain(std::string(versatil_model_prefix) + "ResNetCnn",
                             {{"stem", sequential({conv2d(1, 16, 3, mix_seed(seed, 0), {.padding = 1, .bias = false}),
                                                   batch_norm2d(16), relu()})},
                              {"layer1", sequential(layer1)},
                              {"layer2", sequential(layer2)},
                              {"pool", adaptive_avg_pool2d(1)},
                              {"flatten", flatten()},
                              {"fc", linear(32, fashion_mnist_classes, mix_seed(seed, 1))}});
    model.eval();
    return model;
}

// A MobileNet-style network of depthwise-separable blocks.
//   features      Sequential
//     features.0  Sequential: Conv2d(1, 16, 3, padding=1, bias=False), BatchNorm2d, ReLU    28x28
//     features.1  DepthwiseSeparable(16 -> 32, stride 2)                                   14x14
//     features.2  DepthwiseSeparable(32 -> 64, stride 2)                                   7x7
//     features.3  DepthwiseSeparable(64 -> 64)
//       features.<i>.depthwise (Conv2d, groups = channels) / bn1 / relu1 / pointwise (1x1 Conv2d) / bn2 / relu2
//   pool          AdaptiveAvgPool2d(1)
//   flatten       Flatten
//   fc            Linear(64, 10)
inline ::torch::jit::Module mobilenet_cnn(uint64_t seed) {
    using detail::mix_seed;
    auto features = sequential(
        {sequential({conv2d(1, 16, 3, mix_seed(seed, 0), {.padding = 1, .bias = false}), batch_norm2d(16), relu()}),
         depthwise_separable(16, 32, mix_seed(seed, 1), 2), depthwise_separable(32, 64, mix_seed(seed, 2), 2),
         depthwise_separable(64, 64, mix_seed(seed, 3))});
    auto model = named_chain(std::string(versatil_model_prefix) + "MobileNetCnn",
                             {{"features", features},
                              {"pool", adaptive_avg_pool2d(1)},
                              {"flatten", flatten()},
                              {"fc", linear(64, fashion_mnist_classes, mix_seed(seed, 4))}});
    model.eval();
    return model;
}

// A transformer encoder over the image rows: 28 tokens of 28 pixels, projected to `dim`, plus a
// learned position embedding, `layers` encoder blocks, mean pooling over tokens and a linear head.
//   embed         Linear(28, dim)               (parameter `position` [28, dim] on the model)
//   encoder       Sequential of EncoderBlock(dim, heads, feedforward = 2 * dim)
//     encoder.<i>.self_attn.q_proj / k_proj / v_proj / out_proj   Linear(dim, dim)
//     encoder.<i>.norm1 / norm2                                    LayerNorm(dim)
//     encoder.<i>.linear1 Linear(dim, 2 dim) / relu / linear2 Linear(2 dim, dim)
//   head          Linear(dim, 10)
inline ::torch::jit::Module transformer_encoder(uint64_t seed, int64_t dim = 64, int64_t heads = 4,
                                                int64_t layers = 2) {
    detail::require(layers > 0, "transformer_encoder: layers must be positive");
    using detail::mix_seed;
    constexpr int64_t tokens = 28;
    std::vector<::torch::jit::Module> blocks;
    for (int64_t layer = 0; layer < layers; ++layer)
        blocks.push_back(encoder_block(dim, heads, 2 * dim, mix_seed(seed, 100 + static_cast<uint64_t>(layer))));
    static const std::string source = R"JIT(
def forward(self, x: Tensor) -> Tensor:
    rows = torch.flatten(x, 1, 2)
    h = self.embed.forward(rows) + self.position
    h = self.encoder.forward(h)
    return self.head.forward(torch.mean(h, [1]))
)JIT";
    auto model = detail::instantiate(
        std::string(versatil_model_prefix) + "TransformerEncoder", "",
        {{"embed", linear(tokens, dim, mix_seed(seed, 0))},
         {"encoder", sequential(blocks)},
         {"head", linear(dim, fashion_mnist_classes, mix_seed(seed, 1))}},
        [&](::torch::jit::Module& module) {
            // Like a small nn.Parameter(torch.randn(...) * 0.02) position table.
            auto generator = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, 2));
            module.register_parameter("position",
                                      (at::randn({tokens, dim}, generator) * 0.02).requires_grad_(true), false);
        },
        source);
    model.eval();
    return model;
}

}  // namespace versatil::libtorch
