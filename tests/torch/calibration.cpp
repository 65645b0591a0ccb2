// The calibration methods (the calibration option, core/calibration.hpp) on models trained on
// Fashion-MNIST: on every activation the models compute, each method's observer chooses its
// own range (not a no-op against the default histogram search), auto's range quantizes the
// calibration data with no more error than any single method's, and the option reaches the
// observers and the report through the run-time spec. Figures are printed with -s.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "versatil/libtorch.hpp"
#include "versatil/libtorch/files/data_file.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {

using versatil::testing::trained_classifier;
using versatil::testing::trained_fashion_mnist;

// The values a chain model computes, one per leaf module, in order: each leaf's output for
// every calibration batch. The models here (mlp, small_cnn_mlp) are chains: forward runs the
// children in order, which the test checks against the model's own output.
void leaf_outputs(const ::torch::jit::Module& module, const std::string& path, std::vector<at::Tensor>& inputs,
                  std::vector<std::pair<std::string, std::vector<at::Tensor>>>& out) {
    bool has_children = false;
    for (const auto& child : module.named_children()) {
        has_children = true;
        leaf_outputs(child.value, path.empty() ? child.name : path + "." + child.name, inputs, out);
    }
    if (has_children) return;
    ::torch::jit::Module leaf = module;
    for (at::Tensor& x : inputs) x = leaf.forward({x}).toTensor();
    out.emplace_back(path, inputs);
}

std::vector<std::pair<std::string, std::vector<at::Tensor>>> observed_tensors(const trained_classifier& t) {
    std::vector<at::Tensor> values;
    for (const batch& b : t.data.calibration) values.push_back(b.input(0));
    std::vector<std::pair<std::string, std::vector<at::Tensor>>> tensors{{"input", values}};
    leaf_outputs(t.model, "", values, tensors);
    ::torch::jit::Module model = t.model;
    const at::Tensor expected = model.forward({t.data.calibration.front().input(0)}).toTensor();
    REQUIRE(at::allclose(tensors.back().second.front(), expected));
    return tensors;
}

// xnnpack's static activation spec, observed by `method`.
quantization_spec activation_spec(calibration_method method) {
    quantization_spec spec = *XNNPACK<>::config.input_activation;
    spec.observer = observer_of(method);
    return spec;
}

struct qparams {
    double scale;
    std::int64_t zero_point;
    friend bool operator==(const qparams&, const qparams&) = default;
};

qparams observe(calibration_method method, const std::vector<at::Tensor>& batches) {
    ::torch::jit::Module observer = make_observer(activation_spec(method));
    for (const at::Tensor& x : batches) observer.forward({x});
    const auto result = observer.run_method("calculate_qparams").toTuple();
    return {result->elements()[0].toTensor().item<double>(), result->elements()[1].toTensor().item<std::int64_t>()};
}

// The mean squared error of quantizing every calibration value with `q` (int8, -128..127).
double quantization_mse(const qparams& q, const std::vector<at::Tensor>& batches) {
    double sum = 0.0;
    std::int64_t count = 0;
    for (const at::Tensor& x : batches) {
        const at::Tensor values = x.to(at::kDouble);
        const at::Tensor restored = ((values / q.scale).round() + static_cast<double>(q.zero_point))
                                        .clamp(-128, 127)
                                        .sub(q.zero_point)
                                        .mul(q.scale);
        sum += (values - restored).pow(2).sum().item<double>();
        count += x.numel();
    }
    return sum / static_cast<double>(count);
}

std::string spec_with(calibration_method method) { return "xnnpack:calibration=" + std::string(to_string(method)); }

}  // namespace

TEST_CASE("each calibration method chooses its own ranges, and auto's error is the lowest on every tensor" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    for (const std::string kind : {"mlp", "cnn"}) {
        CAPTURE(kind);
        const trained_classifier& t = trained_fashion_mnist(kind);
        const auto tensors = observed_tensors(t);
        REQUIRE(tensors.size() >= 8);
        std::map<calibration_method, int> differs_from_histogram;
        std::map<calibration_method, double> error_sum;
        int auto_strictly_best = 0;
        for (const auto& [name, batches] : tensors) {
            CAPTURE(name);
            std::map<calibration_method, qparams> chosen;
            std::map<calibration_method, double> error;
            for (const calibration_method method : calibration_methods) {
                chosen[method] = observe(method, batches);
                error[method] = quantization_mse(chosen[method], batches);
                error_sum[method] += error[method];
                if (!(chosen[method] == chosen[calibration_method::histogram])) ++differs_from_histogram[method];
            }
            // auto measures each candidate's error on the values it observed, all of them up to
            // 2^18 (then the comparison is exact, up to the order of summation), else on a random
            // sample of 2^17..2^18: a candidate within the sample's resolution may then be
            // better on all the values. 1 % covers that (the largest miss seen: 0.51 %, features.7
            // of the CNN trained with OpenBLAS, where moving_minmax's range came within the
            // sample's resolution of histogram's); a wrong choice (a range clipping the tail, or
            // one much too wide) costs 10 % or more (the figures printed).
            double best_single = std::numeric_limits<double>::infinity();
            for (const calibration_method method : calibration_methods)
                if (method != calibration_method::automatic) best_single = std::min(best_single, error[method]);
            std::string row;
            for (const calibration_method method : calibration_methods)
                row += std::string(to_string(method)) + " " +
                       std::to_string(error[method] / error[calibration_method::histogram]) + " ";
            MESSAGE(name << " MSE / histogram's: " << row << " histogram MSE " << error[calibration_method::histogram]);
            std::int64_t values = 0;
            for (const at::Tensor& x : batches) values += x.numel();
            const double tolerance = values <= observer_ops::auto_sample_capacity ? 1e-9 : 1e-2;
            CHECK(error[calibration_method::automatic] <= best_single * (1 + tolerance));
            auto_strictly_best += error[calibration_method::automatic] < error[calibration_method::histogram] ? 1 : 0;
        }
        std::string summary;
        for (const calibration_method method : calibration_methods)
            summary += std::string(to_string(method)) + " " + std::to_string(error_sum[method]) + " (" +
                       std::to_string(differs_from_histogram[method]) + " of " + std::to_string(tensors.size()) +
                       " ranges differ from histogram); ";
        MESSAGE(kind << ": summed MSE over observed tensors: " << summary << "auto below histogram on "
                     << auto_strictly_best);
        // Not a no-op: every method other than the histogram search chooses another range for
        // some tensor, and histogram itself is the default observer's.
        CHECK(differs_from_histogram[calibration_method::histogram] == 0);
        for (const calibration_method method : calibration_methods)
            if (method != calibration_method::histogram)
                CHECK_MESSAGE(differs_from_histogram[method] > 0, to_string(method));
        CHECK(error_sum[calibration_method::automatic] <= error_sum[calibration_method::histogram]);
    }
}

TEST_CASE("the calibration option reaches the observers and the report") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mlp");
    const quantization_report plain = versatil::testing::quantize_with(t, "xnnpack");
    REQUIRE(plain.targets.size() == 1);
    CHECK(plain.targets.front().calibration == "histogram (default)");
    CHECK(format_table(plain).find("xnnpack (calibration: histogram (default))") != std::string::npos);
    std::string figures = "xnnpack default " + std::to_string(plain.sqnr_db) + " dB";
    for (const calibration_method method : calibration_methods) {
        CAPTURE(to_string(method));
        const quantization_report report = versatil::testing::quantize_with(t, spec_with(method));
        CHECK(report.targets.front().calibration == to_string(method));
        CHECK(to_json(report)["targets"][0]["calibration"] == std::string(to_string(method)));
        figures += "; " + std::string(to_string(method)) + " " + std::to_string(report.sqnr_db) + " dB";
        // The same observers as the default's give the same model; any other method another one.
        if (method == calibration_method::histogram)
            CHECK(report.sqnr_db == plain.sqnr_db);
        else
            CHECK(report.sqnr_db != plain.sqnr_db);
    }
    MESSAGE("mlp output SQNR per method: " << figures);
    // Dynamic and QAT targets calibrate nothing, and say so by leaving the field empty.
    CHECK(versatil::testing::quantize_with(t, "xnnpack:dynamic").targets.front().calibration.empty());
}

TEST_CASE("unknown calibration methods and options that calibrate nothing are rejected by name") {
    auto unknown = parse_backend_spec("xnnpack:calibration=kl");
    REQUIRE_FALSE(unknown.has_value());
    CHECK(unknown.error().message ==
          "unknown calibration method 'kl' in 'xnnpack:calibration=kl' (methods: minmax, moving_minmax, histogram, "
          "percentile, entropy, auto, output)");
    auto twice = parse_backend_spec("x86_inductor:calibration=auto,calibration=entropy");
    REQUIRE_FALSE(twice.has_value());
    CHECK(twice.error().message.starts_with("more than one calibration method"));
    auto dynamic = parse_backend_spec("xnnpack:dynamic,calibration=minmax");
    REQUIRE_FALSE(dynamic.has_value());
    CHECK(dynamic.error().message.starts_with("options 'calibration' and 'dynamic' do not combine"));
    auto combined = parse_backend_spec("x86_inductor:calibration=auto,cle,bias_correction");
    REQUIRE(combined.has_value());
    CHECK((*combined)->options == "cle,bias_correction,calibration=auto");
    CHECK(calibration_of((*combined)->config) == calibration_method::automatic);
}

// ---- Entropy: TensorRT's KL search on a fixed-width histogram (entropy_histogram.hpp) --------

namespace {

struct entropy_case {
    const char* data;
    double checksum;
    double bin_width;
    std::int64_t first_bin;
    std::int64_t bins;
    std::int64_t values;
    double bottom;
    double top;
};

// Generated by tests/torch/reference/entropy_reference.py with Debian's python3 (python3-torch
// 1.13, numpy, scipy):
//     /usr/bin/python3 tests/torch/reference/entropy_reference.py
// bottom and top are a numpy port of pytorch-quantization's _compute_amax_entropy (stride 1,
// 256 levels, start_bin 128 or the bin of 0 if later) on the histogram the entropy observer
// keeps, read from the lowest bin up (top) and from the highest down (bottom); the comments give
// TensorRT's own amax (its |x| collection, its bin width set by the first batch, its signed
// search where both signs are seen), in order and reversed.
constexpr entropy_case entropy_cases[] = {
    {"relu_growing", 27506.752408965716, 0.0078125, 0, 1289, 49152, 0, 8.1796875},  // TensorRT: 8.45103168, 8.45105362
    {"heavy_tailed", -747.87223719272515, 0.25, -506, 1400, 49152, -38.25, 29.5},   // TensorRT: 36.8798447, 39.5909157
    {"signed_normal", 8076.6704068779945, 0.0078125, -981, 1944, 16384, -7.390625,
     7.4765625},  // TensorRT: 7.47859669, 7.47859669
};

// The same data as the reference script: LibTorch and python3-torch share the generator.
std::vector<at::Tensor> entropy_data(const std::string& name) {
    std::vector<at::Tensor> batches;
    if (name == "relu_growing") {
        ::torch::manual_seed(11);
        for (const double s : {1.0, 2.5, 0.7}) batches.push_back(::torch::randn({16384}).relu() * s);
    } else if (name == "heavy_tailed") {
        ::torch::manual_seed(12);
        for (const double s : {0.5, 1.0, 3.0}) {
            const at::Tensor a = ::torch::randn({16384});
            const at::Tensor b = ::torch::randn({16384});
            batches.push_back(a * b.exp() * s);
        }
    } else {
        REQUIRE(name == "signed_normal");
        ::torch::manual_seed(13);
        batches.push_back(::torch::randn({16384}) * 2 + 0.5);
    }
    return batches;
}

::torch::jit::Module entropy_observed(const std::vector<at::Tensor>& batches) {
    ::torch::jit::Module observer = make_observer(activation_spec(calibration_method::entropy));
    for (const at::Tensor& x : batches) observer.forward({x});
    return observer;
}

}  // namespace

TEST_CASE("entropy calibration clips where pytorch-quantization's KL search does, on each side of the affine grid") {
    for (const entropy_case& expected : entropy_cases) {
        CAPTURE(expected.data);
        const std::vector<at::Tensor> batches = entropy_data(expected.data);
        double checksum = 0.0;
        for (const at::Tensor& x : batches) checksum += x.to(at::kDouble).sum().item<double>();
        REQUIRE(checksum == doctest::Approx(expected.checksum).epsilon(1e-12));
        ::torch::jit::Module observer = entropy_observed(batches);
        const at::Tensor histogram = observer.attr("histogram").toTensor();
        const double min = observer.attr("min_val").toTensor().item<double>();
        const double max = observer.attr("max_val").toTensor().item<double>();
        const observer_ops::entropy_grid grid = observer_ops::entropy_grid_of(min, max);
        CHECK(grid.width == expected.bin_width);
        CHECK(grid.first == expected.first_bin);
        REQUIRE(histogram.numel() == expected.bins);
        CHECK(histogram.sum().item<double>() == static_cast<double>(expected.values));
        const observer_ops::value_range range = observer_ops::entropy_range(min, max, histogram, 256);
        CHECK(range.min == expected.bottom);
        CHECK(range.max == expected.top);
        // The qparams are those of that range.
        const auto [scale, zero_point] = observer_ops::choose_qparams(
            at::full({}, static_cast<float>(range.min)), at::full({}, static_cast<float>(range.max)), -128, 127, false,
            false, default_eps);
        const auto q = versatil::testing::qparams_of(observer);
        CHECK(at::equal(q.scale, scale));
        CHECK(at::equal(q.zero_point, zero_point));
    }
}

// One process's entropy range used to depend on the order of the batches (HistogramObserver's
// resampled histogram): 11.0 to 28.4 dB SQNR over six orders of the same batches. Its histogram
// now has bins whose width and place depend only on the range seen, so every order gives the
// same histogram and range, bit for bit, on real activations whose range varies by batch (each
// batch scaled by 0.5 to 2.25, as inputs of varied contrast would), so the width doubles as the
// range grows in some orders and not in others.
TEST_CASE("entropy calibration gives the same histogram and range whatever the order of the batches") {
    versatil::testing::require_fashion_mnist();
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, 1024);
    const at::Generator generator = at::detail::createCPUGenerator(3);
    const at::Tensor weight = at::randn({8, 1, 3, 3}, generator);
    std::vector<at::Tensor> signed_values, relu_values;
    for (const batch& inputs : split_batches(train.images, 32)) {
        const double contrast = 0.5 + 0.25 * static_cast<double>(signed_values.size() % 8);
        signed_values.push_back(at::conv2d(inputs.input(0), weight) * contrast);
        relu_values.push_back(signed_values.back().relu());
    }
    for (const auto* values : {&signed_values, &relu_values}) {
        ::torch::jit::Module natural = entropy_observed(*values);
        const auto expected = versatil::testing::qparams_of(natural);
        std::vector<std::vector<at::Tensor>> orders{{values->rbegin(), values->rend()}};
        for (const std::size_t ranks : {2, 3, 8}) {
            std::vector<at::Tensor> rank_by_rank;
            for (std::size_t rank = 0; rank < ranks; ++rank)
                for (std::size_t i = rank; i < values->size(); i += ranks) rank_by_rank.push_back((*values)[i]);
            orders.push_back(rank_by_rank);
        }
        for (std::size_t o = 0; o < orders.size(); ++o) {
            CAPTURE(o);
            ::torch::jit::Module observer = entropy_observed(orders[o]);
            CHECK(at::equal(observer.attr("histogram").toTensor(), natural.attr("histogram").toTensor()));
            const auto q = versatil::testing::qparams_of(observer);
            CHECK(at::equal(q.scale, expected.scale));
            CHECK(at::equal(q.zero_point, expected.zero_point));
        }
        // Not a vacuous order: a batch alone has bins of a narrower width than all of them, so
        // the histogram grew (its width doubled) while observing in the orders that start there.
        const auto width = [](::torch::jit::Module observer) {
            return observer_ops::entropy_grid_of(observer.attr("min_val").toTensor().item<double>(),
                                                 observer.attr("max_val").toTensor().item<double>())
                .width;
        };
        double narrowest = std::numeric_limits<double>::infinity();
        for (const at::Tensor& x : *values) narrowest = std::min(narrowest, width(entropy_observed({x})));
        CHECK(narrowest < width(natural));
    }
}

namespace {

// A conv whose output `readers` reads (TorchScript over `y`), one class per case.
::torch::jit::Module conv_read_by(const std::string& readers, int index) {
    ::torch::jit::Module model("__torch__.versatil.tests.ConvReadBy" + std::to_string(index));
    model.register_module("conv", conv2d(1, 4, 3, 1));
    model.define("def forward(self, x):\n    y = self.conv.forward(x)\n    return " + readers + "\n");
    model.eval();
    return model;
}

// The running [min, max] of every per-tensor observer of `prepared`.
std::vector<std::pair<double, double>> observed_ranges(const ::torch::jit::Module& prepared) {
    std::vector<std::pair<double, double>> ranges;
    for (const auto& item : prepared.named_modules()) {
        if (!item.value.hasattr("min_val") || item.value.attr("min_val").toTensor().dim() != 0) continue;
        ranges.emplace_back(item.value.attr("min_val").toTensor().item<double>(),
                            item.value.attr("max_val").toTensor().item<double>());
    }
    return ranges;
}

}  // namespace

TEST_CASE("an observed value that only clamps read is observed as they see it; one that others read too is not") {
    const std::vector<batch> calibration = split_batches(versatil::testing::smooth_images(16, 5) * 20.0, 8);
    struct reader_case {
        const char* readers;
        double low, high;  // what the observer sees of the conv's output
        int clamped;
    };
    constexpr double inf = std::numeric_limits<double>::infinity();
    const std::vector<reader_case> cases{
        {"torch.hardtanh(y, 0.0, 6.0)", 0.0, 6.0, 1},
        {"torch.clamp(y, -1.0, 2.0)", -1.0, 2.0, 1},
        {"torch.hardtanh(y, -2.0, 0.5)", -2.0, 0.5, 1},
        {"torch.hardswish(y)", -3.0, inf, 1},
        {"torch.hardsigmoid(y)", -3.0, 3.0, 1},
        // Two clamps: the hull of what they keep.
        {"(torch.clamp(y, -1.0, 2.0), torch.clamp(y, 0.0, 4.0))", -1.0, 4.0, 1},
        // ReLU6 keeps [0, 6], but the add reads all of y.
        {"torch.hardtanh(y, 0.0, 6.0) + y", -inf, inf, 0},
        // A bound the graph computes is not a constant.
        {"torch.clamp(y, -1.0, y.mean().item())", -inf, inf, 0}};
    int index = 0;
    for (const reader_case& c : cases) {
        const std::string readers = c.readers;
        CAPTURE(readers);
        const ::torch::jit::Module model = conv_read_by(c.readers, index++);
        at::Tensor low = at::full({}, inf), high = at::full({}, -inf);
        for (const batch& b : calibration) {
            const at::Tensor y = versatil::testing::run(model.attr("conv").toModule(), b.input(0));
            low = at::minimum(low, y.min());
            high = at::maximum(high, y.max());
        }
        REQUIRE(low.item<double>() < -3.0);  // the conv's output reaches beyond every clamp here
        REQUIRE(high.item<double>() > 6.0);
        for (const std::string spec : {"x86_inductor", "xnnpack", "xnnpack:calibration=minmax"}) {
            CAPTURE(spec);
            prepared_model prepared = prepare(model, versatil::testing::whole_model(spec));
            CHECK(clamped_observations(prepared.module) == c.clamped);
            calibrate(prepared, calibration);
            const std::pair<double, double> expected{std::max(low.item<double>(), c.low),
                                                     std::min(high.item<double>(), c.high)};
            const std::vector<std::pair<double, double>> ranges = observed_ranges(prepared.module);
            // The histogram's running range rounds outward when a batch widens it, so the
            // unclamped output's range is exact only under min-max calibration.
            if (c.clamped || spec.ends_with("minmax"))
                CHECK(std::find(ranges.begin(), ranges.end(), expected) != ranges.end());
            // Convert observes the value itself again, whether it copies the prepared model or not.
            const converted_model copied = convert(prepared);
            CHECK(clamped_observations(copied.module) == 0);
            CHECK(clamped_observations(prepared.module) == c.clamped);
            CHECK(clamped_observations(convert(std::move(prepared)).module) == 0);
        }
    }
}

TEST_CASE("ReLU6's inputs quantized on what ReLU6 keeps: torchvision's MobileNetV2 gains, its convs still quantized") {
    const ::torch::jit::Module model = load_model(versatil::testing::zoo() / "mobilenet_v2.pt");
    const quantize_data data = batches_of(load_data_file(versatil::testing::zoo() / "mobilenet_v2.data.pt"), 16);
    const model_outputs reference = run_batches(model, data.evaluation);
    // torchvision's MobileNetV2 has 35 ReLU6, each reading a convolution alone: the stem's, one
    // in the first inverted-residual block (expansion 1: no expanding convolution), two in each
    // of the other 16 (torchvision's inverted_residual_setting: 1+2+3+4+3+3+1 = 17 blocks) and
    // the last 1x1 convolution's: 1 + 1 + 32 + 1. Counted here in the file, not by the observers.
    std::int64_t relu6_modules = 0;
    for (const auto& item : model.named_modules())
        relu6_modules += item.value.type()->name()->qualifiedName().ends_with(".ReLU6");
    CHECK(relu6_modules == 35);
    for (const std::string spec : {"x86_inductor", "xnnpack"}) {
        CAPTURE(spec);
        // clamped: as quantize() runs; unclamped: every observer reads the value itself.
        const auto quantized = [&](bool clamped) {
            prepared_model prepared = prepare(model, versatil::testing::whole_model(spec));
            CHECK(clamped_observations(prepared.module) == relu6_modules);
            if (!clamped) restore_observed_values(prepared.module);
            calibrate(prepared, data.calibration, {false});
            return lower(convert(std::move(prepared)), {.sample = data.calibration.front(), .threads = 1});
        };
        const lowered_model clamped = quantized(true), unclamped = quantized(false);
        const engine_scope engine(engine_settings{clamped.plan.engine, 1, std::nullopt});
        const double clamped_db =
            compare_outputs(reference, run_batches(clamped.module, data.evaluation)).overall.sqnr_db;
        const double unclamped_db =
            compare_outputs(reference, run_batches(unclamped.module, data.evaluation)).overall.sqnr_db;
        MESSAGE(spec << ": SQNR " << unclamped_db << " dB with ReLU6's inputs observed whole, " << clamped_db
                     << " dB observed as ReLU6 sees them");
        CHECK(clamped_db > unclamped_db + 0.5);
        CHECK(versatil::testing::count_kind(clamped.module, "quantized::conv2d") ==
              versatil::testing::count_kind(unclamped.module, "quantized::conv2d"));
        CHECK(versatil::testing::count_kind(clamped.module, "quantized::conv2d") > 40);
    }
}

// ---- calibration=output: ranges chosen at the model's output (accuracy/output_ranges.hpp) --------

namespace {

// y = x0 + 0 * x1 + b over a two-feature input that is quantized as one tensor: the output reads
// the first feature only, while the second, 30 times wider, sets every candidate range.
::torch::jit::Module reads_one_feature() {
    ::torch::jit::Module model("__torch__.versatil.tests.ReadsOneFeature");
    ::torch::jit::Module fc = linear(2, 1, 1);
    fc.setattr("weight", at::tensor({1.0f, 0.0f}).reshape({1, 2}));
    fc.setattr("bias", at::tensor({0.25f}));
    model.register_module("fc", fc);
    model.define("def forward(self, x):\n    return self.fc.forward(x)\n");
    model.eval();
    return model;
}

std::vector<batch> two_features(std::uint64_t seed, int batches) {
    ::torch::manual_seed(seed);
    std::vector<batch> data;
    for (int i = 0; i < batches; ++i) data.emplace_back(at::stack({at::randn({64}), at::randn({64}) * 30.0}, 1));
    return data;
}

}  // namespace

TEST_CASE("calibration=output's rule: a range replaces the one kept only if better on both halves, by the margin") {
    using versatil::libtorch::detail::better_on_both_halves;
    const auto scored = [](double all, double first, double second) { return scored_sqnr{all, first, second}; };
    const scored_sqnr kept = scored(20.0, 19.0, 21.0);
    const double margin = output_range_options{}.margin_db;
    CHECK(better_on_both_halves(scored(20.5, 19.5, 21.5), kept, margin));
    // Higher on all the samples, from one half alone: a fit to those samples, not taken.
    CHECK_FALSE(better_on_both_halves(scored(21.0, 22.0, 20.9), kept, margin));
    // Better on both, but within the margin on one.
    CHECK_FALSE(better_on_both_halves(scored(20.1, 19.0 + margin / 2, 21.5), kept, margin));
    CHECK_FALSE(better_on_both_halves(kept, kept, margin));

    // The halves of the scored outputs: rows [0, n/2) and [n/2, n) of each output.
    const model_outputs outputs{{"a", "b"}, {at::arange(6).reshape({6, 1}), at::arange(10).reshape({5, 2})}};
    const model_outputs first = versatil::libtorch::detail::rows_of(outputs, 0.0, 0.5);
    const model_outputs second = versatil::libtorch::detail::rows_of(outputs, 0.5, 1.0);
    CHECK(first.tensors[0].equal(at::arange(3).reshape({3, 1})));
    CHECK(second.tensors[0].equal(at::arange(3, 6).reshape({3, 1})));
    CHECK(first.tensors[1].equal(at::arange(4).reshape({2, 2})));  // 5 rows: 2 and 3
    CHECK(second.tensors[1].equal(at::arange(4, 10).reshape({3, 2})));
    CHECK(first.names == outputs.names);
}

TEST_CASE("calibration=output chooses the range the output needs, where auto chooses the tensor's") {
    const ::torch::jit::Module model = reads_one_feature();
    const std::vector<batch> calibration = two_features(21, 4);
    prepared_model prepared = prepare(model, versatil::testing::whole_model("x86_inductor:calibration=output"));
    calibrate(prepared, calibration, {false});
    REQUIRE(prepared.folded_model);
    const output_range_summary summary =
        choose_output_ranges(prepared, *prepared.folded_model, calibration, [](const std::string&) { return true; },
                             [](prepared_model&& copy) { return convert(std::move(copy)); });
    // The input is the one quantized value: x86_inductor leaves the model's output float.
    REQUIRE(summary.choices.size() == 1);
    const output_range_choice& choice = summary.choices.front();
    REQUIRE(choice.candidates.size() > 1);

    // By hand: the output is w0q * x0q + b, w0q the weight 1 on x86's weight grid (int8 symmetric
    // per channel: scale max|w| / ((quant_max - quant_min) / 2), 1 stored as 127 of 127.5 steps)
    // and the bias float, so each candidate's output SQNR is 10 log10(sum y^2 / sum (y - yq)^2) on
    // the samples scored, and the best range is about the one that quantizes x0 best, whatever it
    // does to x1.
    ::torch::jit::Module observer = find_submodule(prepared.module, choice.observer_path);
    const std::int64_t quant_min = observer.attr("quant_min").toInt(), quant_max = observer.attr("quant_max").toInt();
    const quantization_spec weight = *X86Inductor<>::config.weight;
    const double weight_scale = 1.0 / ((weight.quant_max - weight.quant_min) / 2.0);
    const double w0_steps = std::clamp(std::nearbyint(1.0 / weight_scale), double(weight.quant_min),
                                       double(weight.quant_max));
    const double w0 = w0_steps * static_cast<double>(static_cast<float>(weight_scale));
    at::Tensor x0;
    for (const batch& b : leading_batches(calibration, output_range_options{}.max_samples))
        x0 = x0.defined() ? at::cat({x0, b.input(0).select(1, 0)}) : b.input(0).select(1, 0);
    const at::Tensor y = x0.to(at::kDouble) + 0.25;
    const double signal = y.pow(2).sum().item<double>();
    // Each half too: rows [0, n/2) and [n/2, n) of the scored samples.
    const std::int64_t half = y.size(0) / 2;
    const auto half_sqnr = [&](const at::Tensor& yq, std::int64_t begin, std::int64_t end) {
        const at::Tensor part = y.slice(0, begin, end);
        return 10.0 * std::log10(part.pow(2).sum().item<double>() /
                                 (yq.slice(0, begin, end) - part).pow(2).sum().item<double>());
    };
    std::size_t best = 0;
    std::vector<double> noise, first_half, second_half;
    for (const range_candidate& c : choice.candidates) {
        const at::Tensor x0q = at::fake_quantize_per_tensor_affine(x0, c.scale, c.zero_point, quant_min, quant_max);
        const at::Tensor yq = x0q.to(at::kDouble) * w0 + 0.25;
        noise.push_back((yq - y).pow(2).sum().item<double>());
        first_half.push_back(half_sqnr(yq, 0, half));
        second_half.push_back(half_sqnr(yq, half, y.size(0)));
        const double by_hand = 10.0 * std::log10(signal / noise.back());
        MESSAGE(c.methods << ": scale " << c.scale << ", output SQNR " << c.output_sqnr_db.all << " dB, by hand "
                          << by_hand << "; halves " << c.output_sqnr_db.first_half << " and "
                          << c.output_sqnr_db.second_half);
        // float32 arithmetic in the converted model against float64 here: 0.001 dB covers it.
        CHECK(std::abs(c.output_sqnr_db.all - by_hand) < 1e-3);
        CHECK(std::abs(c.output_sqnr_db.first_half - first_half.back()) < 1e-3);
        CHECK(std::abs(c.output_sqnr_db.second_half - second_half.back()) < 1e-3);
        if (noise.back() < noise[best]) best = noise.size() - 1;
    }
    // The rule, by hand: from auto's, a candidate replaces the one kept so far only if better on
    // both halves by more than the margin. Here the best on all samples is the best on each half.
    std::size_t kept = choice.automatic;
    const double margin = output_range_options{}.margin_db;
    for (std::size_t c = 0; c < choice.candidates.size(); ++c)
        if (first_half[c] > first_half[kept] + margin && second_half[c] > second_half[kept] + margin) kept = c;
    CHECK(choice.chosen == kept);
    CHECK(choice.chosen == best);
    CHECK(choice.chosen != choice.automatic);  // auto weighs x1's error too, and picks another range
    CHECK(summary.chosen_sqnr_db > summary.auto_sqnr_db);

    // Convert quantizes with the choice: the converted output is x0 quantized with it, plus the bias.
    const range_candidate& chosen = choice.candidates[choice.chosen];
    const auto qparams = observer.run_method("calculate_qparams").toTuple();
    CHECK(qparams->elements()[0].toTensor().item<double>() == chosen.scale);
    CHECK(qparams->elements()[1].toTensor().item<std::int64_t>() == chosen.zero_point);
    const converted_model converted = convert(prepared);
    const at::Tensor x = calibration.back().input(0);
    const at::Tensor xq = at::fake_quantize_per_tensor_affine(x, chosen.scale, chosen.zero_point, quant_min, quant_max);
    const at::Tensor expected = xq.select(1, 0) * w0 + 0.25;
    CHECK(at::allclose(versatil::testing::run(converted.module, x).squeeze(1), expected, 1e-5, 1e-5));

    // Through quantize(): the step runs, says what it chose, and held-out data gains too.
    quantize_data data;
    data.calibration = calibration;
    data.evaluation = two_features(22, 2);
    const auto report_of = [&](std::string_view spec) {
        return quantize(model, versatil::testing::whole_model(spec), data, {.per_layer = false, .progress = false})
            .report;
    };
    const quantization_report automatic = report_of("x86_inductor:calibration=auto");
    const quantization_report output = report_of("x86_inductor:calibration=output");
    const auto noted = [](const quantization_report& report) {
        return std::ranges::count_if(report.adjustments, [](const adjustment& a) {
            return a.change.starts_with("calibration=output: ");
        });
    };
    CHECK(noted(automatic) == 0);
    CHECK(noted(output) == 2);  // the input's choice and the summary
    MESSAGE("held-out output SQNR: auto " << automatic.sqnr_db << " dB, output " << output.sqnr_db << " dB");
    CHECK(output.sqnr_db > automatic.sqnr_db);
}
