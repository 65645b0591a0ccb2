// Quantizing models trained on real data (Fashion-MNIST, Debian's dataset-fashion-mnist):
// top-1 stays within one point of float for both backends, static and dynamic, including
// the depthwise-separable CNN where per-tensor int8 is known to fall apart.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"

#include "versatil/torch.hpp"
#include "versatil/torch/demo/fashion_mnist.hpp"
#include "versatil/torch/demo/models.hpp"
#include "versatil/torch/pipeline/training.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {

struct trained {
    ::torch::jit::Module model;
    quantize_data data;
    double float_accuracy;
};

// Trains once per model kind and process; the tests share it.
const trained& trained_model(const std::string& kind) {
    static std::map<std::string, trained> cache;
    if (auto found = cache.find(kind); found != cache.end()) return found->second;
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, 12000);
    const dataset test = load_fashion_mnist(fashion_mnist_split::test, 2000);
    ::torch::jit::Module model = kind == "mobilenet" ? mobilenet_cnn(0) : small_cnn_mlp(0);
    training_options options;
    options.steps = 400;
    options.batch_size = 64;
    options.learning_rate = 2e-3;
    (void)train_classifier(model, train.images, train.labels, options);
    quantize_data data = versatil::testing::fashion_mnist_data(train, test);
    const double accuracy = top1_accuracy(model, test.images, test.labels);
    return cache.emplace(kind, trained{model, std::move(data), accuracy}).first->second;
}

quantization_report quantize_with(const trained& t, std::string_view spec) {
    auto quantizer = runtime_quantizer::compose({{"", *parse_backend_spec(spec)}});
    return quantize(t.model, *quantizer, t.data, {1, 1, false, false}).report;
}

}  // namespace

TEST_CASE("a trained CNN + MLP keeps its top-1 within one point under every backend") {
    versatil::testing::require_fashion_mnist();
    const trained& t = trained_model("cnn");
    MESSAGE("float top-1: " << t.float_accuracy);
    REQUIRE(t.float_accuracy > 0.80);  // a real model, not chance (0.10)
    for (const std::string spec : {"x86_inductor", "xnnpack", "xnnpack:per_tensor", "x86_inductor:dynamic", "xnnpack:dynamic"}) {
        CAPTURE(spec);
        const quantization_report report = quantize_with(t, spec);
        MESSAGE(spec << ": top-1 " << *report.quantized_accuracy << ", SQNR " << report.sqnr_db << " dB");
        CHECK(*report.float_accuracy == doctest::Approx(t.float_accuracy));
        CHECK(*report.quantized_accuracy >= *report.float_accuracy - 0.01);
        CHECK(report.sqnr_db > 20.0);
        CHECK(report.quantized_ops > 0);
    }
}

TEST_CASE("the depthwise-separable CNN keeps its top-1 within one point with xnnpack's per-channel default") {
    versatil::testing::require_fashion_mnist();
    const trained& t = trained_model("mobilenet");
    MESSAGE("float top-1: " << t.float_accuracy);
    REQUIRE(t.float_accuracy > 0.75);
    for (const std::string spec : {"xnnpack", "x86_inductor"}) {
        CAPTURE(spec);
        const quantization_report report = quantize_with(t, spec);
        MESSAGE(spec << ": top-1 " << *report.quantized_accuracy << ", SQNR " << report.sqnr_db << " dB");
        CHECK(*report.quantized_accuracy >= *report.float_accuracy - 0.01);
    }
}
