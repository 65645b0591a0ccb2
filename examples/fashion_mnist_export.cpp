// Trains a small classifier on Fashion-MNIST in C++ and writes what versatil-quantize takes:
// the float TorchScript model and a data file (calib, test, test_labels, and train_inputs /
// train_labels for QAT). It shows how to make those files without Python.
//
//   fashion_mnist_export OUTPUT_DIR [--model small_cnn_mlp|mobilenet_cnn] [--steps N]
//   versatil-quantize --model OUTPUT_DIR/model.pt --data OUTPUT_DIR/data.pt --target =xnnpack
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/stages/training.hpp"

using namespace versatil::libtorch;

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUTPUT_DIR [--model small_cnn_mlp|mobilenet_cnn] [--steps N]\n", argv[0]);
        return 2;
    }
    const std::filesystem::path output = argv[1];
    std::string kind = "small_cnn_mlp";
    long steps = 400;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--model") == 0) kind = argv[i + 1];
        if (std::strcmp(argv[i], "--steps") == 0) steps = std::stol(argv[i + 1]);
    }
    try {
        const dataset train = load_fashion_mnist(fashion_mnist_split::train, 12000);
        const dataset test = load_fashion_mnist(fashion_mnist_split::test, 2000);
        ::torch::jit::Module model = kind == "mobilenet_cnn" ? mobilenet_cnn(0) : small_cnn_mlp(0);
        training_options options;
        options.steps = steps;
        options.learning_rate = 2e-3;
        const training_result trained = train_classifier(model, train.images, train.labels, options);
        std::filesystem::create_directories(output);
        save_module(model, output / "model.pt", {});
        save_data_file({{train.images.slice(0, 0, 512)}, {test.images}, test.labels, train.images, train.labels},
                       output / "data.pt");
        std::printf("%s: %ld steps, final loss %.3f, float top-1 %.2f %% on %lld test images\n", kind.c_str(), steps,
                    trained.final_loss, 100.0 * top1_accuracy(model, test.images, test.labels),
                    static_cast<long long>(test.images.size(0)));
        std::printf("wrote %s and %s\n", (output / "model.pt").c_str(), (output / "data.pt").c_str());
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "fashion_mnist_export: %s\n", failure.what());
        return 1;
    }
}
