// Shared by the LibTorch layer's tests: deterministic synthetic batches, an environment
// fixture, and a graph query.
#pragma once

#include <torch/script.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../runtime/archive_surgery.hpp"
#include "../runtime/environment_helpers.hpp"
#include "versatil/libtorch/stages/calibrate.hpp"
#include "versatil/backends/catalogue.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/files/file_check.hpp"
#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/analysis/measure.hpp"
#include "versatil/libtorch/stages/training.hpp"

namespace versatil::testing {

// An empty directory of this process under the temporary directory, removed with its files.
struct scratch_directory {
    std::filesystem::path path;
    explicit scratch_directory(const std::string& prefix = "versatil-test-")
        : path(std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))) {
        std::filesystem::create_directories(path);
    }
    ~scratch_directory() { std::filesystem::remove_all(path); }
    std::vector<std::string> files() const {
        std::vector<std::string> names;
        for (const auto& entry : std::filesystem::directory_iterator(path))
            names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

// One forward pass without autograd. A Module is a handle: the copy shares the caller's module,
// whose forward is not const.
inline at::Tensor run(const ::torch::jit::Module& model, const at::Tensor& input) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = model;
    return module.forward({input}).toTensor();
}

// A composition the test means to be valid: fails the test with the reason if it is not.
inline runtime_quantizer compose(std::vector<runtime_target> targets) {
    auto composed = runtime_quantizer::compose(std::move(targets));
    REQUIRE_MESSAGE(composed.has_value(), (composed ? "" : composed.error().message));
    return *composed;
}

// A backend spec the test means to be valid ("xnnpack:per_tensor").
inline const backend_descriptor* backend(std::string_view spec) {
    auto backend = parse_backend_spec(spec);
    REQUIRE_MESSAGE(backend.has_value(), std::string(spec));
    return *backend;
}

// The whole model quantized with one backend spec.
inline runtime_quantizer whole_model(std::string_view spec) { return compose({{"", backend(spec)}}); }

// What an observer's calculate_qparams returns.
struct observed_qparams {
    at::Tensor scale;
    at::Tensor zero_point;
};

inline observed_qparams qparams_of(::torch::jit::Module& observer) {
    const auto result = observer.run_method("calculate_qparams").toTuple();
    REQUIRE(result->elements().size() == 2);
    return {result->elements()[0].toTensor(), result->elements()[1].toTensor()};
}

// Smooth random images [count, 1, 28, 28]: low-frequency noise, so activations have realistic
// ranges (white noise would make every layer's range look alike).
inline at::Tensor smooth_images(std::int64_t count, std::uint64_t seed) {
    const at::Generator generator = at::detail::createCPUGenerator(seed);
    return at::upsample_bilinear2d(at::randn({count, 1, 7, 7}, generator), {28, 28}, false);
}

inline std::vector<libtorch::batch> smooth_batches(std::int64_t batches, std::int64_t rows, std::uint64_t seed) {
    return libtorch::split_batches(smooth_images(batches * rows, seed), rows);
}

// The layers whose output the model returns in float (float_model_outputs.hpp: x86_inductor's
// static targets), as the report lists them.
inline std::vector<std::string> float_output_layers(const std::vector<libtorch::adjustment>& adjustments) {
    std::vector<std::string> layers;
    for (const libtorch::adjustment& a : adjustments)
        if (a.change.find("output the model returns kept in float") != std::string::npos)
            layers.push_back(a.module_path);
    return layers;
}

inline std::vector<std::string> float_output_layers(const libtorch::quantization_report& report) {
    return float_output_layers(report.adjustments);
}

// How many nodes of a kind the (frozen, inlined) forward graph holds.
inline int count_kind(const ::torch::jit::Module& module, const std::string& kind) {
    int count = 0;
    for (const ::torch::jit::Node* node : module.get_method("forward").graph()->nodes())
        count += std::string(node->kind().toQualString()) == kind ? 1 : 0;
    return count;
}

// The Fashion-MNIST tests need Debian's dataset-fashion-mnist (tools/install-deps installs
// it); without it they fail with the fix rather than pass vacuously.
inline void require_fashion_mnist() {
    const std::string missing = std::string("Fashion-MNIST is missing from ") +
                                libtorch::default_fashion_mnist_directory + ": apt-get install dataset-fashion-mnist";
    REQUIRE_MESSAGE(libtorch::fashion_mnist_available(), missing);
}

// Debian's interpreter, with python3-torch (a python3 earlier on PATH may lack torch).
inline constexpr const char* torch_python = "/usr/bin/python3";

// The tests that load a saved model in Python's torch need python3-torch (tools/install-deps
// installs it); without it they fail with the fix rather than print "skipped" and pass.
inline void require_python_torch() {
    const std::string missing =
        std::string(torch_python) + " cannot import torch: apt-get install python3-torch (tools/install-deps)";
    REQUIRE_MESSAGE(std::system((std::string(torch_python) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0,
                    missing);
}

// The zoo models the LibTorch tests load (tests/zoo/make_zoo.py: torchvision's classifiers and
// hand-written models, scripted by Debian's python3-torch), written once per process.
inline const std::filesystem::path& zoo() {
    static const scratch_directory directory("versatil-test-zoo-");
    static const bool written = [] {
        require_python_torch();
        const std::string command =
            std::string(torch_python) + " " VERSATIL_SOURCE_ROOT "/tests/zoo/make_zoo.py " + directory.path.string() +
            " --only vit,encoder,text,multitask,two_inputs,mobilenet_v3_small,mobilenet_v2,resnet18 > /dev/null";
        return std::system(command.c_str()) == 0;
    }();
    REQUIRE_MESSAGE(written, "tests/zoo/make_zoo.py failed (it needs python3-torch, python3-torchvision and "
                             "dataset-fashion-mnist: tools/install-deps)");
    return directory.path;
}

// Fashion-MNIST as the quantize flow takes it: calibration from training images the test set
// never sees, the test set (with labels) for evaluation, the training set for QAT.
inline libtorch::quantize_data fashion_mnist_data(const libtorch::dataset& train, const libtorch::dataset& test) {
    libtorch::quantize_data data;
    data.calibration = libtorch::split_batches(train.images.slice(0, 0, 512), 64);
    data.evaluation = libtorch::split_batches(test.images, 250);
    data.evaluation_labels = test.labels;
    data.train_inputs = train.images;
    data.train_labels = train.labels;
    return data;
}

// A demo model trained on Fashion-MNIST, with the quantize flow's data (fashion_mnist_data).
struct trained_classifier {
    ::torch::jit::Module model;
    libtorch::quantize_data data;
    double float_accuracy = 0.0;  // top-1 on the test set
};

namespace detail {

// What the trained weights depend on: the sources of the library's LibTorch layer (models,
// training, data loading) and of this file; LibTorch; the BLAS library the alternatives system
// points at, and the CPU (OpenBLAS picks its kernels by CPU, and it trains other weights than
// the reference BLAS). Empty when the sources are not where the build saw them.
inline std::string training_fingerprint() {
    const std::filesystem::path root = VERSATIL_SOURCE_ROOT;
    const std::filesystem::path layer = root / "include/versatil/libtorch";
    const std::filesystem::path helpers = root / "tests/torch/torch_test_helpers.hpp";
    std::error_code error;
    if (!std::filesystem::is_directory(layer, error) || !std::filesystem::is_regular_file(helpers, error)) return {};
    std::vector<std::filesystem::path> sources{helpers};
    for (const auto& entry : std::filesystem::recursive_directory_iterator(layer))
        if (entry.is_regular_file()) sources.push_back(entry.path());
    std::sort(sources.begin(), sources.end());
    std::uint32_t crc = 0;
    const auto add = [&crc](std::string_view bytes) {
        crc = libtorch::detail::crc32_of(bytes.data(), bytes.size(), crc);
    };
    for (const auto& source : sources) {
        add(source.lexically_relative(root).string());
        add(read_bytes(source));
    }
    add(TORCH_VERSION);
    const std::filesystem::path blas = std::filesystem::canonical("/usr/lib/x86_64-linux-gnu/libblas.so.3", error);
    add(error ? std::string("no BLAS") : blas.string());
    std::ifstream cpuinfo("/proc/cpuinfo");
    for (std::string line; std::getline(cpuinfo, line);) {
        if (line.starts_with("model name")) add(line);
        if (line.starts_with("flags")) {  // the first processor's are every processor's
            add(line);
            break;
        }
    }
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc));
    return hex;
}

// Where a trained model is kept between test processes: under VERSATIL_TEST_CACHE (tools/test
// sets it), or nowhere.
inline std::optional<std::filesystem::path> kept_model_file(const std::string& kind) {
    const char* directory = std::getenv("VERSATIL_TEST_CACHE");
    if (directory == nullptr || *directory == '\0') return std::nullopt;
    static const std::string fingerprint = training_fingerprint();
    if (fingerprint.empty()) return std::nullopt;
    return std::filesystem::path(directory) / ("fashion-mnist-" + kind + "-" + fingerprint + ".pt");
}

}  // namespace detail

// Trains once per kind ("cnn": small_cnn_mlp, "mobilenet": mobilenet_cnn, "mlp": mlp of 3 x 128)
// and process; the tests of a file share it. With VERSATIL_TEST_CACHE set, once per kind and
// fingerprint (detail::training_fingerprint) for all test processes: each meson test is a
// process, three files train the same models, and under AddressSanitizer, whose allocator maps
// every large tensor afresh, one training takes minutes. Training runs on one thread, so on one
// machine it repeats to the bit: a kept model is the model this process would train.
// train_classifier itself is tested in training.cpp and run by other tests either way.
inline const trained_classifier& trained_fashion_mnist(const std::string& kind) {
    static std::map<std::string, trained_classifier> cache;
    if (auto found = cache.find(kind); found != cache.end()) return found->second;
    const libtorch::dataset train = libtorch::load_fashion_mnist(libtorch::fashion_mnist_split::train, 12000);
    const libtorch::dataset test = libtorch::load_fashion_mnist(libtorch::fashion_mnist_split::test, 2000);
    const std::optional<std::filesystem::path> kept = detail::kept_model_file(kind);
    std::error_code error;
    ::torch::jit::Module model;
    if (kept && std::filesystem::is_regular_file(*kept, error)) {
        model = ::torch::jit::load(kept->string());
    } else {
        model = kind == "mobilenet" ? libtorch::mobilenet_cnn(0)
                : kind == "mlp"     ? libtorch::mlp(0, 128, 3)
                                    : libtorch::small_cnn_mlp(0);
        libtorch::training_options options;
        options.steps = 400;
        options.batch_size = 64;
        options.learning_rate = 2e-3;
        // One thread, whatever LibTorch's default on the machine, so that on one machine the trained
        // weights, and the figures measured on them, repeat (another thread count sums in another order).
        options.num_threads = 1;
        (void)libtorch::train_classifier(model, train.images, train.labels, options);
        if (kept) {  // staged and renamed: a process that reads it beside this one sees all or nothing
            std::filesystem::create_directories(kept->parent_path(), error);
            libtorch::output_file output(*kept);
            libtorch::write_module(output, model, {});
            output.commit();
        }
    }
    const double accuracy = libtorch::top1_accuracy(model, test.images, test.labels);
    return cache.emplace(kind, trained_classifier{model, fashion_mnist_data(train, test), accuracy}).first->second;
}

// The whole model quantized with one backend spec ("xnnpack:per_tensor"), its report.
inline libtorch::quantization_report quantize_with(const trained_classifier& t, std::string_view spec) {
    return libtorch::quantize(t.model, whole_model(spec), t.data, {.per_layer = false, .progress = false}).report;
}

}  // namespace versatil::testing
