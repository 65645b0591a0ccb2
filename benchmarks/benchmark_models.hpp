// What the LibTorch benchmarks share: the four Fashion-MNIST models and how they are trained
// (so torch_models and accuracy_steps measure the same weights: training is deterministic on one
// thread), the data split, and small helpers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/stages/training.hpp"

namespace versatil::benchmarks {

inline constexpr std::int64_t calibration_batch = 32;
inline constexpr std::int64_t calibration_batches = 8;
inline constexpr std::int64_t evaluation_batch = 250;
inline constexpr std::int64_t train_images = 12000;

struct model_entry {
    std::string name;
    std::function<::torch::jit::Module()> build;
    double learning_rate;
};

inline std::vector<model_entry> benchmark_models() {
    using namespace versatil::libtorch;
    return {
        {"mlp", [] { return mlp(0); }, 2e-3},
        {"transformer_encoder", [] { return transformer_encoder(0); }, 1e-3},
        {"resnet_cnn", [] { return resnet_cnn(0); }, 2e-3},
        {"mobilenet_cnn", [] { return mobilenet_cnn(0); }, 2e-3},
    };
}

// The model of `entry`, trained for `steps` Adam steps on one thread.
inline libtorch::training_result train_model(::torch::jit::Module& model, const model_entry& entry,
                                             const libtorch::dataset& data, std::int64_t steps) {
    libtorch::training_options options;
    options.steps = steps;
    options.learning_rate = entry.learning_rate;
    options.num_threads = 1;
    return libtorch::train_classifier(model, data.images, data.labels, options);
}

inline std::vector<libtorch::batch> batches_of(const at::Tensor& all, std::int64_t rows) {
    std::vector<libtorch::batch> batches;
    for (std::int64_t begin = 0; begin < all.size(0); begin += rows)
        batches.push_back(all.slice(0, begin, std::min(begin + rows, all.size(0))).contiguous());
    return batches;
}

// Calibration images are training images the models were trained on; evaluation is held out.
inline at::Tensor calibration_images(const libtorch::dataset& train) {
    return train.images.slice(0, 0, calibration_batch * calibration_batches).contiguous();
}

inline double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// The command line of the benchmarks that write one results file: OUT.json [--steps N]
// [--repeats N]; none when OUT.json is missing (the usage is printed).
struct benchmark_arguments {
    std::string out;
    std::int64_t steps = 300;
    int repeats = 1;
};

inline std::optional<benchmark_arguments> parse_benchmark_arguments(int argc, char** argv, int default_repeats) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s OUT.json [--steps N] [--repeats N]\n", argv[0]);
        return std::nullopt;
    }
    benchmark_arguments arguments{.out = argv[1], .repeats = default_repeats};
    for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) arguments.steps = std::stol(argv[++i]);
        else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) arguments.repeats = std::stoi(argv[++i]);
    }
    return arguments;
}

// Fashion-MNIST as the model benchmarks split it: the training images, the calibration batches
// (training images) and 2000 held-out test images in evaluation batches.
struct benchmark_data {
    libtorch::dataset train;
    libtorch::dataset test;
    std::vector<libtorch::batch> calibration;
    std::vector<libtorch::batch> evaluation;
};

inline benchmark_data load_benchmark_data() {
    using namespace versatil::libtorch;
    benchmark_data data{load_fashion_mnist(fashion_mnist_split::train, train_images),
                        load_fashion_mnist(fashion_mnist_split::test, 2000), {}, {}};
    data.calibration = batches_of(calibration_images(data.train), calibration_batch);
    data.evaluation = batches_of(data.test.images, evaluation_batch);
    return data;
}

// "x86_inductor" + "cle" -> "x86_inductor:cle"; "xnnpack:per_tensor" + "cle" -> "xnnpack:per_tensor,cle".
inline std::string with_options(const std::string& spec, const std::string& options) {
    if (options.empty()) return spec;
    return spec + (spec.find(':') == std::string::npos ? ":" : ",") + options;
}

// `repeats` quantizations (one thread, no per-layer analysis): the last lowered model and the
// seconds each took.
struct timed_quantization {
    libtorch::lowered_model lowered;
    std::vector<double> seconds;
};

inline timed_quantization quantize_timed(const ::torch::jit::Module& model, const runtime_quantizer& quantizer,
                                         const libtorch::quantize_data& data, int repeats) {
    std::vector<double> seconds;
    std::optional<libtorch::lowered_model> lowered;
    for (int i = 0; i < std::max(repeats, 1); ++i) {
        const auto start = std::chrono::steady_clock::now();
        lowered = libtorch::quantize_model(model, quantizer, data, {.threads = 1, .per_layer = false, .progress = false});
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return {std::move(*lowered), std::move(seconds)};
}

// The machine's load average (1, 5 and 15 minutes) as /proc/loadavg gives it, recorded before
// and after a run: the other jobs sharing the cores, which loosen the times.
inline std::string load_average() {
    std::ifstream file("/proc/loadavg");
    std::string one, five, fifteen;
    file >> one >> five >> fifteen;
    return one + " " + five + " " + fifteen;
}

// The command as run from the repository root and the UTC time it started, for the results file.
inline std::string command_line(const char* name, int argc, char** argv) {
    std::string command = std::string("build-bench/benchmarks/") + name;
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    return command;
}

inline std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    return date;
}

inline runtime_quantizer whole_model(const std::string& spec) {
    auto backend = parse_backend_spec(spec);
    if (!backend) throw std::runtime_error(backend.error().message);
    auto composed = runtime_quantizer::compose({{"", *backend}});
    if (!composed) throw std::runtime_error(composed.error().message);
    return *composed;
}

}  // namespace versatil::benchmarks
