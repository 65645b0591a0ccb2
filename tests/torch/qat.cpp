// Quantization-aware training: fake-quantize modules pass gradients straight through,
// observe only while training, and a model fine-tuned with them converts to the same lowered
// form as post-training quantization, at least as accurate.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"

#include <map>
#include <numeric>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/fashion_mnist.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/stages/qat.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using versatil::testing::count_kind;

namespace {

runtime_quantizer compose(std::string_view spec) {
    return *runtime_quantizer::compose({{"", *parse_backend_spec(spec)}});
}

// Every fake-quantize module's observed minimum, weights' and activations' alike.
at::Tensor observed_minima(const ::torch::jit::Module& model) {
    std::vector<at::Tensor> minima;
    for (const auto& item : model.named_modules())
        if (item.name.find("_observer_") != std::string::npos)
            minima.push_back(item.value.attr("min_val").toTensor().flatten().clone());
    REQUIRE_FALSE(minima.empty());
    return at::cat(minima);
}

double mean_of(const std::vector<double>& values, std::size_t begin, std::size_t end) {
    return std::accumulate(values.begin() + static_cast<std::ptrdiff_t>(begin),
                           values.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
           static_cast<double>(end - begin);
}

}  // namespace

TEST_CASE(
    "a fake-quantize module rounds like the int8 kernels and passes gradients straight through inside the range") {
    ::torch::jit::Module fake = make_fake_quantize(*XNNPACK<qat>::config.input_activation);
    fake.train();
    const at::Tensor observed = at::linspace(-1.0, 1.0, 101);
    (void)fake.forward({observed});  // first batch sets the range [-1, 1]
    fake.eval();
    const at::Tensor x = at::tensor({-2.0F, -0.5F, 0.013F, 0.9F, 3.0F}).requires_grad_(true);
    const at::Tensor y = fake.forward({x}).toTensor();
    const auto qparams = math::choose_qparams(-1.0F, 1.0F, *XNNPACK<qat>::config.input_activation);
    for (int i = 0; i < 5; ++i)
        CHECK(y[i].item<float>() ==
              doctest::Approx(math::fake_quantize(x[i].item<float>(), qparams, {-128, 127})).epsilon(1e-6));
    y.sum().backward();
    const at::Tensor gradient = x.grad();
    CHECK(gradient[0].item<float>() == 0.0F);  // clamped: no gradient
    CHECK(gradient[1].item<float>() == 1.0F);
    CHECK(gradient[2].item<float>() == 1.0F);
    CHECK(gradient[3].item<float>() == 1.0F);
    CHECK(gradient[4].item<float>() == 0.0F);
}

TEST_CASE(
    "prepare for QAT folds batch norm, fake-quantizes weights and activations, and the gradient reaches every weight") {
    prepared_model prepared = prepare(small_cnn_mlp(0), compose("xnnpack:qat"));
    CHECK(libtorch::detail::count_nodes(prepared.module,
                                        [](std::string_view kind) { return kind == "aten::batch_norm"; }) == 0);
    prepared.module.train();
    const at::Tensor x = versatil::testing::smooth_images(8, 1);
    const at::Tensor loss = prepared.module.forward({x}).toTensor().pow(2).mean();
    loss.backward();
    int weights = 0;
    for (const auto& parameter : prepared.module.named_parameters()) {
        if (!parameter.value.grad().defined()) continue;  // the folded batch norms' own, now unused
        CAPTURE(parameter.name);
        CHECK(parameter.value.is_leaf());
        CHECK(parameter.value.grad().abs().sum().item<double>() > 0.0);
        weights += parameter.name.ends_with(".weight") ? 1 : 0;
    }
    CHECK(weights == 4);  // two convolutions, two linear layers
}

TEST_CASE("observation follows train() and eval(), and freeze_observers stops it") {
    prepared_model prepared = prepare(small_cnn_mlp(0), compose("x86_inductor:qat"));
    const at::Tensor small = versatil::testing::smooth_images(4, 2), large = small * 10.0;
    prepared.module.train();
    (void)prepared.module.forward({small});
    const at::Tensor after_first = observed_minima(prepared.module);
    prepared.module.eval();
    (void)prepared.module.forward({large});
    CHECK(at::equal(observed_minima(prepared.module), after_first));  // eval: no observation
    prepared.module.train();
    (void)prepared.module.forward({large});
    const at::Tensor after_training = observed_minima(prepared.module);
    CHECK_FALSE(at::equal(after_training, after_first));
    freeze_observers(prepared.module);
    (void)prepared.module.forward({large * 10.0});
    CHECK(at::equal(observed_minima(prepared.module), after_training));
}

TEST_CASE("QAT fine-tuning on Fashion-MNIST converts to int8 at least as accurate as post-training quantization" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, 12000);
    const dataset test = load_fashion_mnist(fashion_mnist_split::test, 2000);
    // The depthwise-separable CNN on both backends (where int8 is hardest), the CNN + MLP on one.
    for (const auto& [kind, backends] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"mobilenet_cnn", {"xnnpack", "x86_inductor"}}, {"small_cnn_mlp", {"x86_inductor"}}}) {
        CAPTURE(kind);
        ::torch::jit::Module model = kind == "mobilenet_cnn" ? mobilenet_cnn(0) : small_cnn_mlp(0);
        training_options pretraining;
        pretraining.steps = 400;
        pretraining.learning_rate = 2e-3;
        (void)train_classifier(model, train.images, train.labels, pretraining);

        const quantize_data data = versatil::testing::fashion_mnist_data(train, test);
        quantize_options options{.per_layer = false, .progress = false};
        options.qat.training.steps = 300;
        options.qat.training.learning_rate = 5e-4;
        options.qat.freeze_observers_after = 200;
        std::vector<double> losses;  // the last QAT run's loss at every step
        options.qat.training.on_step = [&losses](std::int64_t step, double loss) {
            if (step == 0) losses.clear();
            losses.push_back(loss);
        };
        for (const std::string& backend : backends) {
            CAPTURE(backend);
            const quantization_result ptq = quantize(model, compose(backend), data, options);
            const quantization_result qat = quantize(model, compose(backend + ":qat"), data, options);
            MESSAGE(kind << " " << backend << ": float " << *qat.report.float_accuracy << ", PTQ "
                         << *ptq.report.quantized_accuracy << ", QAT " << *qat.report.quantized_accuracy
                         << " after " << *qat.report.qat_steps << " steps in " << *qat.report.qat_seconds << " s");
            CHECK(losses.size() == 300);
            CHECK(mean_of(losses, 250, 300) < mean_of(losses, 0, 50));  // it learned
            CHECK(*qat.report.quantized_accuracy >= *ptq.report.quantized_accuracy);
            CHECK(*qat.report.quantized_accuracy >= *qat.report.float_accuracy - 0.01);
            // The same lowered form as post-training quantization, but for the output layer that
            // x86_inductor's post-training quantization returns in float: QAT trained it rounded.
            CHECK(qat.report.quantized_ops ==
                  ptq.report.quantized_ops +
                      static_cast<std::int64_t>(versatil::testing::float_output_layers(ptq.report).size()));
            CHECK(versatil::testing::float_output_layers(qat.report).empty());
            CHECK(count_kind(qat.model.module, "aten::fake_quantize_per_tensor_affine") == 0);
            CHECK(count_kind(qat.model.module, "aten::fake_quantize_per_channel_affine") == 0);
        }
    }
}

TEST_CASE("a QAT model saves and reloads like a post-training one") {
    quantize_data data;
    const at::Tensor inputs = versatil::testing::smooth_images(256, 4);
    data.calibration = split_batches(inputs.slice(0, 0, 64), 32);
    data.train_inputs = inputs;
    data.train_labels = inputs.flatten(1).sum(1).gt(0).to(at::kLong);
    quantize_options options{.per_layer = false, .progress = false};
    options.qat.training.steps = 20;
    const lowered_model model = quantize_model(small_cnn_mlp(0), compose("xnnpack:qat"), data, options);
    const auto path = std::filesystem::temp_directory_path() / ("versatil-qat-" + std::to_string(::getpid()) + ".pt");
    save(model, path);
    const loaded_model loaded = load_quantized(path);
    std::filesystem::remove(path);
    CHECK(loaded.metadata["targets"][0]["config"]["is_qat"] == true);
    const engine_scope scope(loaded.engine);
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module original = model.module, reloaded = loaded.module;
    CHECK(at::equal(original.forward({inputs.slice(0, 0, 8)}).toTensor(),
                    reloaded.forward({inputs.slice(0, 0, 8)}).toTensor()));
}

TEST_CASE("QAT needs training data and mixes with no post-training target") {
    quantize_data data{versatil::testing::smooth_batches(2, 8, 1)};
    CHECK_THROWS_WITH_AS(quantize_model(small_cnn_mlp(0), compose("xnnpack:qat"), data),
                         doctest::Contains("'train_inputs' and 'train_labels'"), error);
    auto mixed = runtime_quantizer::compose({{"features", *parse_backend_spec("xnnpack:qat")},
                                             {"classifier", *parse_backend_spec("xnnpack")}});
    REQUIRE_FALSE(mixed.has_value());
    CHECK(mixed.error().rule == composition_rule::qat_and_ptq_must_not_mix);
    prepared_model ptq = prepare(small_cnn_mlp(0), compose("xnnpack"));
    CHECK_THROWS_WITH_AS(train_qat(ptq, data.calibration[0].input(), at::zeros({8}, at::kLong), {}),
                         doctest::Contains("post-training"), error);
}
