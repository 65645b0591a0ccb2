// Reliability of the LibTorch layer: numerical edges (constant and all-zero inputs, an
// all-zero weight channel, huge ranges, denormals, single-element batches) quantize with
// finite, valid qparams; engine scopes restore every piece of process state when an
// exception leaves nested scopes; odd but well-formed data files get a typed error.
#include "doctest_with_torch.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "torch_test_helpers.hpp"
#include "versatil/libtorch.hpp"
#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using versatil::testing::smooth_images;

namespace {

using versatil::testing::whole_model;

// Every scale the converted model holds (activation scales as doubles, per-channel weight
// scales as tensors) is finite and positive, and every zero point lies in the range of the dtype
// it quantizes to (quint8 [0, 255], qint8 [-128, 127]), read from the _scalar_type_ attribute
// LibTorch keeps beside it. Returns how many scale / zero-point pairs it checked.
int check_qparams(const ::torch::jit::Module& converted) {
    int pairs = 0;
    for (const ::torch::jit::Module& module : converted.modules()) {
        for (const auto& attribute : module.named_attributes(/*recurse=*/false)) {
            const std::string& name = attribute.name;
            const std::size_t scale_at = name.find("_scale_"), zero_point_at = name.find("_zero_point_");
            if (scale_at == std::string::npos && zero_point_at == std::string::npos) continue;
            CAPTURE(name);
            // per-channel qparams are tensors; per-tensor scales doubles and zero points ints
            const at::Tensor value = attribute.value.isTensor() ? attribute.value.toTensor().to(at::kDouble)
                                     : attribute.value.isDouble()
                                         ? at::scalar_tensor(attribute.value.toDouble(), at::kDouble)
                                         : at::scalar_tensor(static_cast<double>(attribute.value.toInt()), at::kDouble);
            if (scale_at != std::string::npos) {
                CHECK(at::isfinite(value).all().item<bool>());
                CHECK(value.gt(0.0).all().item<bool>());
                ++pairs;
                continue;
            }
            const std::string scalar_type = name.substr(0, zero_point_at) + "_scalar_type_" +
                                            name.substr(zero_point_at + std::string_view("_zero_point_").size());
            REQUIRE(module.hasattr(scalar_type));
            const auto dtype = static_cast<c10::ScalarType>(module.attr(scalar_type).toInt());
            REQUIRE((dtype == c10::kQUInt8 || dtype == c10::kQInt8));
            const double low = dtype == c10::kQUInt8 ? 0.0 : -128.0, high = dtype == c10::kQUInt8 ? 255.0 : 127.0;
            CHECK(value.ge(low).all().item<bool>());
            CHECK(value.le(high).all().item<bool>());
        }
    }
    return pairs;
}

// 10 log10(signal / noise) of a quantized output against the float model's, in double (the
// squares of a huge range overflow float).
double output_sqnr_db(const ::torch::jit::Module& float_model, const at::Tensor& input, const at::Tensor& output) {
    const ::torch::NoGradGuard no_grad;
    ::torch::jit::Module module = float_model;
    const at::Tensor reference = module.forward({input}).toTensor().to(at::kDouble);
    const at::Tensor noise = output.to(at::kDouble) - reference;
    return 10.0 * std::log10(reference.pow(2).sum().item<double>() / noise.pow(2).sum().item<double>());
}

struct numerical_case {
    const char* name;
    std::vector<batch> calibration;
    at::Tensor sample;
    bool zero_weight_channels = false;
};

}  // namespace

TEST_CASE("numerical edges quantize with finite, valid qparams and finite outputs") {
    const float denormal = std::numeric_limits<float>::denorm_min() * 1000.0F;  // about 1.4e-42
    REQUIRE(std::fpclassify(denormal) == FP_SUBNORMAL);
    const at::Tensor images = smooth_images(8, 11);
    const std::vector<numerical_case> cases{
        {"constant inputs (min == max)", {at::full({8, 1, 28, 28}, 0.5F)}, at::full({2, 1, 28, 28}, 0.5F)},
        {"all-zero inputs", {at::zeros({8, 1, 28, 28})}, at::zeros({2, 1, 28, 28})},
        {"all-zero weight channels", {images}, images.slice(0, 0, 2), true},
        {"huge range", {images * 1e25F}, images.slice(0, 0, 2) * 1e25F},
        {"denormal inputs", {images.sign() * denormal}, images.slice(0, 0, 2).sign() * denormal},
        {"single-element batches", split_batches(images, 1), images.slice(0, 0, 1)},
    };
    for (const char* spec : {"x86_inductor", "xnnpack"}) {
        for (const numerical_case& c : cases) {
            CAPTURE(spec);
            CAPTURE(c.name);
            ::torch::jit::Module model = small_cnn_mlp(3);
            if (c.zero_weight_channels) {
                const ::torch::NoGradGuard no_grad;
                find_submodule(model, "features.0").attr("weight").toTensor()[0].zero_();   // a conv output channel
                find_submodule(model, "classifier.fc1").attr("weight").toTensor()[5].zero_();  // a linear row
            }
            prepared_model prepared = prepare(model, whole_model(spec));
            calibrate(prepared, c.calibration, {false});
            const converted_model converted = convert(prepared);
            CHECK(check_qparams(converted.module) == 9);  // the input, four layer outputs, four weights
            const lowered_model lowered = lower(converted, {c.sample, 1});
            const engine_scope scope(lowered.plan.engine);
            const ::torch::NoGradGuard no_grad;
            ::torch::jit::Module module = lowered.module;
            const at::Tensor output = module.forward({c.sample}).toTensor();
            CHECK(output.size(0) == c.sample.size(0));
            CHECK(at::isfinite(output).all().item<bool>());
            // Finite is not enough: the output must also be the float model's, within int8's
            // noise. Measured 37.0-49.8 dB over these cases and both backends (seeded, one thread);
            // the floor is 2 dB under the lowest. The huge range is the exception below.
            if (std::string_view(c.name) != "huge range") CHECK(output_sqnr_db(model, c.sample, output) > 35.0);
        }
    }
}

// Known defect, kept visible: with inputs scaled by 1e25 the quantized model returns zeros
// (SQNR 0 dB against the float model, whose outputs reach 7e23), though every qparam is finite
// and valid. This test fails until that is fixed: doctest counts it as a pass only when exactly
// its two SQNR checks fail, one per backend (an exception, or another failure, fails it), and
// reports it as failed once it passes, so the decorator is removed then.
TEST_CASE("a huge input range keeps the float model's outputs" * doctest::expected_failures(2)) {
    const at::Tensor images = smooth_images(8, 11) * 1e25F;
    for (const char* spec : {"x86_inductor", "xnnpack"}) {
        CAPTURE(spec);
        const ::torch::jit::Module model = small_cnn_mlp(3);
        prepared_model prepared = prepare(model, whole_model(spec));
        calibrate(prepared, {images}, {false});
        const lowered_model lowered = lower(convert(prepared), {images.slice(0, 0, 2), 1});
        const engine_scope scope(lowered.plan.engine);
        const ::torch::NoGradGuard no_grad;
        ::torch::jit::Module module = lowered.module;
        const at::Tensor output = module.forward({images.slice(0, 0, 2)}).toTensor();
        CHECK(output_sqnr_db(model, images.slice(0, 0, 2), output) > 35.0);
    }
}

TEST_CASE("quantize() with one single-element batch reports finite figures") {
    quantize_data data;
    data.calibration = {smooth_images(1, 4)};
    const quantization_result result =
        quantize(small_cnn_mlp(1), whole_model("xnnpack"), data, {.per_layer = false, .progress = false});
    CHECK(std::isfinite(result.report.max_abs_diff));
    CHECK(result.report.quantized_ops == 4);
}

TEST_CASE("an exception leaving nested engine scopes restores engine, threads and denormal mode in order") {
    at::globalContext().setQEngine(at::QEngine::ONEDNN);
    at::set_num_threads(1);
    at::globalContext().setFlushDenormal(false);
    const auto state = [] {
        return engine_name(at::globalContext().qEngine()) + "/" + std::to_string(at::get_num_threads()) + "/" +
               (flush_denormal_state().value_or(false) ? "flush" : "keep");
    };
    REQUIRE(state() == "onednn/1/keep");
    std::vector<std::string> seen;
    try {
        const engine_scope outer(engine_settings{at::QEngine::QNNPACK, 2, true});
        seen.push_back(state());
        {
            const engine_scope inner(engine_settings{at::QEngine::ONEDNN, 1, false});
            seen.push_back(state());
        }
        seen.push_back(state());  // the inner scope's end gives back the outer scope's state
        const engine_scope inner(engine_settings{at::QEngine::ONEDNN, 1, std::nullopt});
        seen.push_back(state());
        throw std::runtime_error("fault inside nested scopes");
    } catch (const std::runtime_error&) {
        seen.push_back(state());
    }
    CHECK(seen == std::vector<std::string>{"qnnpack/2/flush", "onednn/1/keep", "qnnpack/2/flush", "onednn/1/flush",
                                           "onednn/1/keep"});
}

TEST_CASE("an exception inside an engine scope and a backend environment restores both") {
    const versatil::testing::variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    const versatil::testing::variable_fixture cuda("CUDA_VISIBLE_DEVICES", "1");
    at::globalContext().setQEngine(at::QEngine::QNNPACK);
    const runtime_quantizer quantizer = whole_model("x86_inductor");
    CHECK_THROWS_AS(([&] {
                        const auto environment = quantizer.environment_context();
                        const engine_scope engine(at::QEngine::ONEDNN);
                        REQUIRE(versatil::testing::read_variable("TORCHINDUCTOR_FREEZING") == "1");
                        throw std::runtime_error("fault");
                    }()),
                    std::runtime_error);
    CHECK(engine_name(at::globalContext().qEngine()) == "qnnpack");
    CHECK_FALSE(versatil::testing::read_variable("TORCHINDUCTOR_FREEZING").has_value());
    CHECK(versatil::testing::read_variable("CUDA_VISIBLE_DEVICES") == "1");
    at::globalContext().setQEngine(at::QEngine::ONEDNN);
}

TEST_CASE("a data file whose tensors have no batch dimension gets a typed error") {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("versatil-reliability-" + std::to_string(::getpid()) + ".pt");
    const at::Tensor test = at::randn({2, 1, 28, 28});
    for (const auto& [name, file] : std::vector<std::pair<const char*, data_file>>{
             // at::tensor(1) has shape [1]; at::scalar_tensor is the 0-d tensor meant here
             {"scalar labels", {.evaluation = {test}, .evaluation_labels = at::scalar_tensor(1, at::kLong)}},
             {"scalar test and labels",
              {.evaluation = {at::scalar_tensor(1.0)}, .evaluation_labels = at::scalar_tensor(1, at::kLong)}},
         }) {
        CAPTURE(name);
        save_data_file(file, path);
        try {
            (void)load_data_file(path);
            FAIL("must throw");
        } catch (const error& failure) {
            CHECK(failure.kind() == error_kind::invalid_data_file);
            CHECK(std::string(failure.what()).find(path.string()) != std::string::npos);
        }
    }
    std::filesystem::remove(path);
}
