// The LibTorch flow on models built in C++: prepare, calibrate, convert, lower, for both
// backends, static and dynamic; excludes; the caller's model untouched; the process state
// restored; clear errors for bad input.
#include "doctest_with_torch.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>

#include "torch_test_helpers.hpp"
#include "versatil/libtorch.hpp"
#include "versatil/libtorch/files/data_file.hpp"
#include "versatil/libtorch/torchscript/batch.hpp"
#include "versatil/libtorch/torchscript/graph_walk.hpp"
#include "versatil/libtorch/passes/inference_graph.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using versatil::testing::count_kind;
using versatil::testing::smooth_batches;

namespace {

using versatil::testing::backend;
using versatil::testing::compose;

quantize_data synthetic_data() {
    return {smooth_batches(8, 32, 1), smooth_batches(4, 32, 2), std::nullopt};
}

// Output SQNR is checked against the figure measured for each case (torch_tests -sf='*pipeline.cpp' -s,
// LibTorch 1.13): the data and weights are seeded and quantize() runs on one thread, so a
// figure repeats run to run. The floor is 1 dB under it (26 % more noise power): limiting
// oneDNN to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, a CPU without AVX-512) moved the figures by at most
// 0.35 dB. A real loss is larger: one bit fewer for activations (reduce_range) costs 4.4 dB.
// This floor is the code's own figure, so it guards against a change, not for correctness: the
// SQNR itself is checked on hand-worked tensors (metrics.cpp), and what a backend should reach
// on a model nobody here wrote comes from PyTorch's own flow (the zoo's floors, check_zoo.py).
void check_sqnr(const quantization_report& report, double measured_db) {
    MESSAGE("SQNR " << report.sqnr_db << " dB (measured when the floor was set: " << measured_db << " dB)");
    CHECK(report.sqnr_db > measured_db - 1.0);
}

// The versatil error `run` throws; none when it returns.
std::optional<error> error_of(const std::function<void()>& run) {
    try {
        run();
    } catch (const error& failure) {
        return failure;
    }
    return std::nullopt;
}

bool says(const error& failure, const std::string& text) {
    return std::string(failure.what()).find(text) != std::string::npos;
}

std::string fingerprint(const ::torch::jit::Module& model) {
    std::string text = model.get_method("forward").graph()->toString();
    for (const at::Tensor& parameter : model.parameters()) text += std::to_string(parameter.sum().item<double>()) + ";";
    for (const at::Tensor& buffer : model.buffers()) text += std::to_string(buffer.sum().item<double>()) + ";";
    return text;
}

}  // namespace

TEST_CASE("both backends quantize a CNN + MLP, static and dynamic, with real quantized kernels") {
    const ::torch::jit::Module model = small_cnn_mlp(0);
    const quantize_data data = synthetic_data();
    struct expectation {
        const char* spec;
        const char* engine;
        int quantized_convs;
        double measured_sqnr_db;
        int float_output_layers = 0;  // x86_inductor's last linear returns float (float_model_outputs.hpp)
    };
    for (const expectation& e : {expectation{"x86_inductor", "onednn", 2, 40.2, 1},
                                 expectation{"xnnpack", "qnnpack", 2, 39.1},
                                 expectation{"xnnpack:per_tensor", "qnnpack", 2, 38.8},
                                 expectation{"x86_inductor:reduce_range", "onednn", 2, 36.8, 1},
                                 expectation{"x86_inductor:dynamic", "onednn", 0, 41.3},
                                 expectation{"xnnpack:dynamic", "qnnpack", 0, 46.6}}) {
        const std::string spec = e.spec;
        CAPTURE(spec);
        const quantization_result result =
            quantize(model, compose({{"", backend(e.spec)}}), data, {.per_layer = false, .progress = false});
        CHECK(result.report.engine == e.engine);
        check_sqnr(result.report, e.measured_sqnr_db);
        CHECK(result.report.quantizable_ops == (e.quantized_convs == 0 ? 2 : 4));  // dynamic: linears only
        const ::torch::jit::Module& lowered = result.model.module;
        CHECK(count_kind(lowered, "quantized::conv2d_relu") == e.quantized_convs);  // conv + relu fused
        if (e.quantized_convs == 0) {
            CHECK(count_kind(lowered, "quantized::linear_dynamic") == 2);
            CHECK(result.report.quantized_ops == 2);
        } else {
            CHECK(count_kind(lowered, "quantized::linear_relu") + count_kind(lowered, "quantized::linear") ==
                  2 - e.float_output_layers);
            CHECK(count_kind(lowered, "aten::linear") == e.float_output_layers);
            CHECK(result.report.quantized_ops == 4 - e.float_output_layers);
            CHECK(count_kind(lowered, "aten::conv2d") == 0);
        }
        CHECK(result.report.compression_ratio() > 3.0);
    }
}

TEST_CASE("options change what is built: reduce_range halves the activation range") {
    const ::torch::jit::Module model = small_cnn_mlp(3);
    const quantize_data data = synthetic_data();
    prepared_model full = prepare(model, compose({{"", backend("x86_inductor")}}));
    prepared_model reduced = prepare(model, compose({{"", backend("x86_inductor:reduce_range")}}));
    calibrate(full, data.calibration);
    calibrate(reduced, data.calibration);
    const lowered_model a = lower(convert(full)), b = lower(convert(reduced));
    const auto input_scale = [](const ::torch::jit::Module& m) {
        for (const ::torch::jit::Node* node : m.get_method("forward").graph()->nodes())
            if (std::string(node->kind().toQualString()) == "aten::quantize_per_tensor")
                return ::torch::jit::toIValue(node->input(1))->toDouble();  // the scale
        return 0.0;
    };
    // Half the levels for about the same range: about twice the scale (the histogram search may
    // settle on a slightly different range for 128 levels than for 256).
    CHECK(input_scale(b.module) > 1.5 * input_scale(a.module));
}

TEST_CASE("an excluded module stays float and everything else is quantized") {
    const ::torch::jit::Module model = small_cnn_mlp(1);
    const quantization_result result =
        quantize(model, compose({{"", backend("x86_inductor")}, {"classifier.fc2", nullptr}}), synthetic_data(),
                 {.per_layer = false, .progress = false});
    const ::torch::jit::Module& lowered = result.model.module;
    CHECK(count_kind(lowered, "aten::linear") == 1);  // fc2, in float
    CHECK(count_kind(lowered, "quantized::linear_relu") + count_kind(lowered, "quantized::linear") == 1);
    CHECK(count_kind(lowered, "quantized::conv2d_relu") == 2);
    CHECK(result.report.quantized_ops == 3);
    check_sqnr(result.report, 37.8);
}

TEST_CASE("targets aimed at submodules quantize only those") {
    const ::torch::jit::Module model = small_cnn_mlp(2);
    const quantization_result result =
        quantize(model, compose({{"features", backend("xnnpack")}}), synthetic_data(), {1, 1, true, false});
    CHECK(count_kind(result.model.module, "quantized::conv2d_relu") == 2);
    CHECK(count_kind(result.model.module, "aten::linear") == 2);
    // Per-layer SQNR covers exactly the layers the target quantizes, worst first.
    REQUIRE(result.report.per_layer.size() == 2);
    CHECK(result.report.per_layer[0].name.starts_with("features."));
    CHECK(result.report.per_layer[0].sqnr_db <= result.report.per_layer[1].sqnr_db);
}

TEST_CASE("xnnpack linear layers get per-tensor weights, and the report says so") {
    const quantization_result result = quantize(small_cnn_mlp(4), compose({{"", backend("xnnpack")}}), synthetic_data(),
                                                {.per_layer = false, .progress = false});
    REQUIRE(result.report.adjustments.size() == 2);
    CHECK(result.report.adjustments[0].module_path == "classifier.fc1");
    CHECK(result.report.adjustments[1].module_path == "classifier.fc2");
    // per_tensor asks for it everywhere: nothing to adjust
    CHECK(quantize(small_cnn_mlp(4), compose({{"", backend("xnnpack:per_tensor")}}), synthetic_data(),
                   {.per_layer = false, .progress = false})
              .report.adjustments.empty());
}

TEST_CASE("the caller's model is never modified") {
    ::torch::jit::Module model = small_cnn_mlp(5);
    model.train();  // even in train mode, where a forward would move batch-norm statistics
    const std::string before = fingerprint(model);
    (void)quantize(model, compose({{"", backend("x86_inductor")}}), synthetic_data(), {1, 1, true, false});
    CHECK(fingerprint(model) == before);
    CHECK(model.is_training());
}

TEST_CASE("quantizing leaves nothing behind in the caller's compilation unit or the observers'") {
    // Loaded as users load models: every class type in one compilation unit.
    std::stringstream saved;
    small_cnn_mlp(5).save(saved);
    const ::torch::jit::Module model = ::torch::jit::load(saved);
    const std::shared_ptr<::torch::jit::CompilationUnit> unit = model.type()->compilation_unit();
    const std::shared_ptr<::torch::jit::CompilationUnit> observers =
        make_observer(quantization_spec{}).type()->compilation_unit();
    const std::size_t functions = unit->get_functions().size();
    const std::size_t observer_functions = observers->get_functions().size();
    for (const char* name : {"x86_inductor", "xnnpack"}) {
        CAPTURE(name);
        std::weak_ptr<::torch::jit::CompilationUnit> lowered_unit;
        {
            const quantization_result result = quantize(model, compose({{"", backend(name)}}), synthetic_data(),
                                                        {.per_layer = false, .progress = false});
            lowered_unit = result.model.module.type()->compilation_unit();
            CHECK(lowered_unit.lock() != unit);
        }
        CHECK(unit->get_functions().size() == functions);  // was 5 graphs more per quantization
        CHECK(observers->get_functions().size() == observer_functions);  // was 6 more under xnnpack
        CHECK(lowered_unit.expired());  // the lowered model's types go with it
    }
}

TEST_CASE("convert and lower leave what they are given; handed over, they work on it in place") {
    const std::vector<batch> calibration = smooth_batches(4, 32, 1);
    for (const char* name : {"x86_inductor", "xnnpack"}) {
        CAPTURE(name);
        const quantization_plan plan = plan_for(compose({{"", backend(name)}}));
        const auto calibrated = [&] {
            prepared_model prepared = prepare(mlp(3), plan);
            calibrate(prepared, calibration, {false});
            return prepared;
        };
        const prepared_model kept = calibrated();
        const std::string prepared_graph = kept.module.get_method("forward").graph()->toString();
        const converted_model converted = convert(kept);
        CHECK(kept.module.get_method("forward").graph()->toString() == prepared_graph);
        const std::string converted_graph = converted.module.get_method("forward").graph()->toString();
        const lowered_model lowered = lower(converted);
        CHECK(converted.module.get_method("forward").graph()->toString() == converted_graph);

        const lowered_model in_place = lower(convert(calibrated()));
        const engine_scope engine(engine_settings{plan.engine, 1, std::nullopt});
        ::torch::jit::Module a = lowered.module;
        ::torch::jit::Module b = in_place.module;
        CHECK(at::equal(a.forward(calibration.front().arguments()).toTensor(),
                        b.forward(calibration.front().arguments()).toTensor()));
    }
}

namespace {

// A module's forward graph as text, numbered afresh (a copied graph renumbers its values) and
// without the ___torch_mangle_N that copies of its types carry.
std::string unmangled_graph(const ::torch::jit::Module& module) {
    static const std::regex mangle("___torch_mangle_[0-9]+\\.");
    return std::regex_replace(module.get_method("forward").graph()->copy()->toString(), mangle, "");
}

}  // namespace

TEST_CASE("batch-norm folding is skipped only where it would copy the model and change nothing") {
    CHECK(libtorch::detail::has_torch_nn_convolution(resnet_cnn(0)));
    CHECK(libtorch::detail::has_torch_nn_convolution(small_cnn_mlp(0)));
    CHECK_FALSE(libtorch::detail::has_torch_nn_convolution(mlp(0)));
    CHECK_FALSE(libtorch::detail::has_torch_nn_convolution(transformer_encoder(0)));
    // Without a torch.nn convolution LibTorch's fold returns the same graphs and weights.
    for (::torch::jit::Module model : {mlp(0), transformer_encoder(0)}) {
        const ::torch::jit::Module folded = ::torch::jit::FoldConvBatchNorm(model);
        const auto modules = model.named_modules();
        const auto folded_modules = folded.named_modules();
        REQUIRE(modules.size() == folded_modules.size());
        auto copy = folded_modules.begin();
        for (const auto& item : modules) {
            CAPTURE(item.name);
            CHECK(item.name == (*copy).name);
            CHECK(unmangled_graph(item.value) == unmangled_graph((*copy).value));
            const auto parameters = item.value.named_parameters(false);
            const auto folded_parameters = (*copy).value.named_parameters(false);
            REQUIRE(parameters.size() == folded_parameters.size());
            auto folded_parameter = folded_parameters.begin();
            for (const auto& parameter : parameters) {
                CHECK(parameter.name == (*folded_parameter).name);
                CHECK(at::equal(parameter.value, (*folded_parameter).value));
                ++folded_parameter;
            }
            ++copy;
        }
    }
}

namespace {

// An MLP whose linear layers are each read by a batch norm: `a` (6 -> 5), `b` and `c` (5 -> 5, one
// class: one graph, two modules to fold), a bias-less `fc` before a batch norm without affine
// parameters, beside `side`, of fc's class but read by no batch norm; and `shared`, whose linear
// output is read by its batch norm and by an add, so folding would change the add's input. Batch
// norm statistics and affine parameters are random, settled by train-mode passes (a fold against
// identity statistics proves nothing).
constexpr const char* linear_batch_norm_models = R"PY(import sys
import torch
from torch import nn
torch.manual_seed(0)
def block(cin, cout):
    return nn.Sequential(nn.Linear(cin, cout), nn.BatchNorm1d(cout), nn.ReLU())
class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = block(6, 5), block(5, 5), block(5, 5)
        self.fc, self.bn = nn.Linear(5, 4, bias=False), nn.BatchNorm1d(4, affine=False)
        self.side = nn.Linear(5, 4, bias=False)
    def forward(self, x):
        h = self.c(self.b(self.a(x)))
        return self.bn(self.fc(h)) + self.side(h)
class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.bn = nn.Linear(6, 4), nn.BatchNorm1d(4)
    def forward(self, x):
        y = self.fc(x)
        return self.bn(y) + y
for name, model in (("blocks", Blocks()), ("shared", Shared())):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.momentum = None
            if m.affine:
                with torch.no_grad():
                    m.weight.uniform_(0.5, 2.0)
                    m.bias.uniform_(-1.0, 1.0)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(64, 6) * 2.0 + 0.5)
    torch.jit.script(model.eval()).save(sys.argv[1] + "/" + name + ".pt")
)PY";

std::string inlined_forward(const ::torch::jit::Module& module) {
    const std::shared_ptr<::torch::jit::Graph> graph = module.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    return graph->toString();
}

}  // namespace

TEST_CASE("linear + batch norm is folded as conv + batch norm is: same float outputs, no batch norm to quantize") {
    versatil::testing::require_python_torch();
    const versatil::testing::scratch_directory directory("versatil-fold-linear-");
    const auto script = (directory.path / "models.py").string();
    std::ofstream(script) << linear_batch_norm_models;
    REQUIRE(std::system((std::string(versatil::testing::torch_python) + " " + script + " " + directory.path.string())
                            .c_str()) == 0);
    const ::torch::jit::Module blocks = ::torch::jit::load((directory.path / "blocks.pt").string());
    const ::torch::jit::Module shared = ::torch::jit::load((directory.path / "shared.pt").string());
    ::torch::manual_seed(1);
    const at::Tensor input = at::randn({32, 6}) * 2.0 + 0.5;

    // The fold against the float model it came from: equal within float rounding.
    ::torch::jit::Module folded = private_clone(blocks);
    folded.eval();
    CHECK(fold_linear_batch_norm(folded) == 3);  // a, b and c (one graph), fc
    CHECK(inlined_forward(folded).find("aten::batch_norm") == std::string::npos);
    CHECK(inlined_forward(blocks).find("aten::batch_norm") != std::string::npos);  // the caller's model as it was
    const at::Tensor expected = run(blocks, input);
    CHECK(expected.abs().max().item<float>() > 0.5F);
    CHECK(at::allclose(run(folded, input), expected, 1e-5, 1e-5));
    CHECK(folded.attr("fc").toModule().attr("bias").isTensor());  // the bias-less layer has the folded bias
    CHECK(folded.attr("side").toModule().attr("bias").isNone());  // and the other of its class none

    // A linear output read by more than its batch norm stays unfolded.
    ::torch::jit::Module kept = private_clone(shared);
    kept.eval();
    CHECK(fold_linear_batch_norm(kept) == 0);
    CHECK(at::equal(run(kept, input), run(shared, input)));

    // Every backend, static, QAT and dynamic: the lowered model has no batch norm left (LibTorch
    // 1.13 leaves quantized::batch_norm after a quantized linear layer otherwise), its linear
    // layers all quantized, and (post-training) its outputs near the unfolded float model's
    // (measured 29.6 to 36.9 dB).
    const quantize_data data{libtorch::split_batches(at::randn({64, 6}) * 2.0 + 0.5, 16),
                             std::vector<batch>{batch(input)}, std::nullopt, at::randn({64, 6}) * 2.0 + 0.5,
                             at::randint(0, 4, {64}, at::kLong)};
    for (const char* spec : {"x86_inductor", "xnnpack", "cortex_m", "xnnpack:qat", "x86_inductor:dynamic",
                             "xnnpack:dynamic"}) {
        CAPTURE(spec);
        const quantization_result result =
            quantize(blocks, compose({{"", backend(spec)}}), data, {.per_layer = false, .progress = false});
        const std::string graph = result.model.module.get_method("forward").graph()->toString();
        CHECK(graph.find("batch_norm") == std::string::npos);
        CHECK(result.report.quantized_ops == 5);
        MESSAGE("SQNR " << result.report.sqnr_db << " dB");
        // QAT trains the weights (on random labels here), so only post-training keeps the float outputs.
        if (std::string_view(spec).find("qat") == std::string_view::npos) CHECK(result.report.sqnr_db > 20.0);
    }
}

TEST_CASE("lowering restores the engine, threads and backend environment, also when it throws") {
    const versatil::testing::variable_fixture freezing("TORCHINDUCTOR_FREEZING", std::nullopt);
    const versatil::testing::variable_fixture cuda("CUDA_VISIBLE_DEVICES", "0");
    at::globalContext().setQEngine(at::QEngine::QNNPACK);
    at::set_num_threads(1);
    const auto check_restored = [] {
        CHECK(engine_name(at::globalContext().qEngine()) == "qnnpack");
        CHECK(at::get_num_threads() == 1);
        CHECK_FALSE(versatil::testing::read_variable("TORCHINDUCTOR_FREEZING").has_value());
        CHECK(versatil::testing::read_variable("CUDA_VISIBLE_DEVICES") == "0");
    };
    prepared_model prepared = prepare(small_cnn_mlp(6), compose({{"", backend("x86_inductor")}}));
    calibrate(prepared, smooth_batches(2, 8, 3));
    const converted_model converted = convert(prepared);
    (void)lower(converted, {smooth_batches(1, 4, 4)[0], 2});
    check_restored();

    const at::Tensor wrong_shape = at::randn({4, 3, 28, 28});  // 3 channels: the model takes 1
    const std::optional<error> failure = error_of([&] { (void)lower(converted, {wrong_shape, 2}); });
    REQUIRE_MESSAGE(failure, "lowering with a sample the model cannot take must throw");
    CHECK(failure->kind() == error_kind::lowering_failed);
    check_restored();
    at::globalContext().setQEngine(at::QEngine::ONEDNN);
}

namespace {
// A model written for one batch size, as exported or hand-tuned models often are: its forward
// reshapes to 8 rows.
::torch::jit::Module fixed_batch_model() {
    ::torch::jit::Module model("__torch__.versatil.tests.FixedBatch");
    model.register_module("conv", conv2d(1, 4, 3, 1));
    model.register_module("fc", linear(4 * 26 * 26, 10, 2));
    model.define(R"(
def forward(self, x):
    return self.fc.forward(self.conv.forward(x).reshape(8, 2704))
)");
    model.eval();
    return model;
}
}  // namespace

TEST_CASE("the lowered model is checked on one sample, or on the whole batch when it cannot take one") {
    prepared_model prepared = prepare(fixed_batch_model(), compose({{"", backend("x86_inductor")}}));
    calibrate(prepared, smooth_batches(2, 8, 3));
    const converted_model converted = convert(prepared);
    // One sample cannot go through reshape(8, 2704): the check falls back on the whole batch.
    const lowered_model lowered = lower(converted, {smooth_batches(1, 8, 4)[0], 1});
    CHECK(count_kind(lowered.module, "quantized::conv2d") == 1);
    // A batch of 4 fails whole too: that failure is the one reported.
    const std::optional<error> failure = error_of([&] { (void)lower(converted, {smooth_batches(1, 4, 4)[0], 1}); });
    REQUIRE_MESSAGE(failure, "a batch the model cannot take must fail the check");
    CHECK(failure->kind() == error_kind::lowering_failed);
    CHECK(says(*failure, "shape '[8, 2704]' is invalid for input of size 10816"));
}

TEST_CASE("an engine failure found while measuring is lowering_failed, as at lowering's check") {
    // QNNPACK cannot run a dynamic q_proj kept in float beside quantized k_proj and v_proj, and
    // says so only when the model runs: here, past lowering's one-sample check, when quantize()
    // measures the evaluation data.
    const std::optional<error> failure = error_of([] {
        (void)quantize(transformer_encoder(0, 32, 2, 1),
                       compose({{"", backend("xnnpack:dynamic")}, {"encoder.0.self_attn.q_proj", nullptr}}),
                       synthetic_data(), {.per_layer = false, .progress = false});
    });
    REQUIRE_MESSAGE(failure, "QNNPACK must refuse this model");
    CHECK(failure->kind() == error_kind::lowering_failed);
    CHECK(says(*failure, "qnnpack engine cannot run the lowered model"));
}

TEST_CASE("a missing module path is an error listing the children that do exist") {
    const std::optional<error> failure =
        error_of([] { (void)prepare(small_cnn_mlp(0), compose({{"classifier.fc3", backend("xnnpack")}})); });
    REQUIRE_MESSAGE(failure, "must throw");
    CHECK(failure->kind() == error_kind::missing_module);
    CHECK(says(*failure, "'classifier.fc3'"));
    CHECK(says(*failure, "'classifier' has no child 'fc3'"));
    CHECK(says(*failure, "'fc1'"));
    CHECK(says(*failure, "'fc2'"));
}

TEST_CASE("a model on a device the backends do not support is rejected") {
    ::torch::jit::Module model = small_cnn_mlp(0);
    // Set on this instance only: registering a new attribute would change the class type that
    // every small_cnn_mlp shares.
    find_submodule(model, "classifier.fc2").setattr("bias", at::empty({10}, at::device(at::kMeta)));
    const std::optional<error> failure = error_of([&] { (void)prepare(model, compose({{"", backend("xnnpack")}})); });
    REQUIRE_MESSAGE(failure, "must throw");
    CHECK(failure->kind() == error_kind::unsupported_device);
    CHECK(says(*failure, "'meta'"));
    CHECK(says(*failure, "support only: cpu"));
}

TEST_CASE("backends lowering to different engines cannot share a model") {
    const std::optional<error> failure = error_of([] {
        (void)prepare(small_cnn_mlp(0),
                      compose({{"features", backend("xnnpack")}, {"classifier", backend("x86_inductor")}}));
    });
    REQUIRE_MESSAGE(failure, "must throw");
    CHECK(failure->kind() == error_kind::unsupported_composition);
    CHECK(says(*failure, "'features' (xnnpack) and 'classifier' (x86_inductor)"));
}

TEST_CASE("bad calibration data is rejected by batch, before any observer sees it") {
    prepared_model prepared = prepare(small_cnn_mlp(0), compose({{"", backend("x86_inductor")}}));
    const auto kind_of = [&](const std::vector<batch>& batches) {
        try {
            calibrate(prepared, batches);
        } catch (const error& failure) {
            return std::make_pair(failure.kind(), std::string(failure.what()));
        }
        return std::make_pair(error_kind::invalid_argument, std::string("no error"));
    };
    CHECK(kind_of({}).first == error_kind::no_calibration_data);
    auto with_nan = smooth_batches(3, 4, 1);
    with_nan[2].input()[1][0][5][5] = std::numeric_limits<float>::quiet_NaN();
    const auto [nan_kind, nan_message] = kind_of(with_nan);
    CHECK(nan_kind == error_kind::invalid_calibration_data);
    CHECK(nan_message.find("calibration batch 2 holds NaN or Inf") != std::string::npos);
    auto with_inf = smooth_batches(1, 4, 1);
    with_inf[0].input()[0][0][0][0] = std::numeric_limits<float>::infinity();
    CHECK(kind_of(with_inf).first == error_kind::invalid_calibration_data);
    CHECK(kind_of({at::empty({0, 1, 28, 28})}).second.find("calibration batch 0 is empty") != std::string::npos);
    CHECK(kind_of({at::ones({2, 1, 28, 28}, at::kComplexFloat)}).second.find("dtype ComplexFloat") !=
          std::string::npos);
    const auto [shape_kind, shape_message] = kind_of({at::randn({2, 1, 28, 28}), at::randn({2, 1, 14, 14})});
    CHECK(shape_kind == error_kind::invalid_calibration_data);
    CHECK(shape_message.find("calibration batch 1 ([2, 1, 14, 14] Float) does not fit the model") != std::string::npos);
}

TEST_CASE("dynamic targets need no calibration data") {
    prepared_model prepared = prepare(small_cnn_mlp(0), compose({{"", backend("xnnpack:dynamic")}}));
    calibrate(prepared, {});
    const lowered_model lowered = lower(convert(prepared), {smooth_batches(1, 2, 5)[0], std::nullopt});
    CHECK(count_kind(lowered.module, "quantized::linear_dynamic") == 2);
}

TEST_CASE("compile-time quantizers drive the same flow") {
    using whole = Quantizer<Target<"features", XNNPACK<>>, Target<"classifier", XNNPACK<per_tensor>>,
                            Exclude<"classifier.fc2">>;
    const quantization_result result =
        quantize(small_cnn_mlp(7), whole{}, synthetic_data(), {.per_layer = false, .progress = false});
    CHECK(result.report.targets.size() == 3);
    CHECK(result.report.targets[2].backend == "none");
    CHECK(count_kind(result.model.module, "aten::linear") == 1);
    check_sqnr(result.report, 39.6);
}

TEST_CASE("attention's q/k/v projections share one input and one QConfig under xnnpack's per-tensor linear fallback") {
    for (const std::int64_t layers : {1, 2}) {
        CAPTURE(layers);
        const quantization_result result =
            quantize(transformer_encoder(0, 64, 4, layers), compose({{"", backend("xnnpack")}}), synthetic_data(),
                     {.per_layer = false, .progress = false});
        // Every linear quantized: embed, q/k/v/out_proj, linear1 and linear2 per block, head.
        CHECK(result.report.quantizable_ops == 6 * layers + 2);
        CHECK(result.report.quantized_ops == result.report.quantizable_ops);
        CHECK(result.report.adjustments.size() == static_cast<std::size_t>(result.report.quantizable_ops));
        check_sqnr(result.report, layers == 1 ? 30.8 : 31.1);
    }
}

namespace {
// A module whose forward branches on self.training, as stochastic depth and dropout do.
::torch::jit::Module training_branch_model() {
    ::torch::jit::Module model("__torch__.versatil.tests.TrainingBranch");
    model.register_parameter("weight", at::ones({1}), false);
    model.register_attribute("training", c10::BoolType::get(), true);  // what torch.nn.Module has
    model.define(R"(
def forward(self, x):
    if self.training:
        return x * self.weight * 2.0
    return x * self.weight
)");
    model.eval();
    return model;
}

int if_nodes(const ::torch::jit::Module& model) {
    return static_cast<int>(
        nodes_where(model.get_method("forward").graph(), [](const ::torch::jit::Node* node) {
            return node->kind() == c10::prim::If;
        }).size());
}
}  // namespace

TEST_CASE("inference specialization folds training-only branches in a clone, never in the caller's model") {
    const ::torch::jit::Module model = training_branch_model();
    ::torch::jit::Module clone = model.clone();
    clone.eval();
    CHECK(specialize_for_inference(clone, specialization_depth::none).constants == 0);
    CHECK(if_nodes(clone) == 1);
    const inference_specialization changes = specialize_for_inference(clone, specialization_depth::branches);
    CHECK(changes.constants == 1);
    CHECK(if_nodes(clone) == 0);
    CHECK(if_nodes(model) == 1);  // the caller's graphs are untouched
    const at::Tensor x = at::randn({3});
    CHECK(at::equal(clone.forward({x}).toTensor(), ::torch::jit::Module(model).forward({x}).toTensor()));
}

TEST_CASE("a model's outputs are named by where they sit: tuples, lists and dicts, nested") {
    c10::impl::GenericDict heads(c10::StringType::get(), c10::TensorType::get());
    heads.insert("logits", at::zeros({2, 3}));
    heads.insert("box", at::ones({2, 4}));
    const c10::IValue output = c10::ivalue::Tuple::create({at::zeros({2}), heads, c10::IValue()});
    const std::vector<named_output> flat = flatten_output(output);
    REQUIRE(flat.size() == 3);
    CHECK(flat[0].name == "0");
    CHECK(flat[1].name == "1.logits");
    CHECK(flat[2].name == "1.box");
    CHECK(flatten_output(at::zeros({1})).front().name.empty());
    CHECK_THROWS_WITH_AS(flatten_output(c10::IValue(3)), doctest::Contains("no tensor in it"), error);
}

TEST_CASE("batches of several inputs split together; inputs with different sample counts are refused") {
    const std::vector<batch> batches = split_batches({at::zeros({5, 3}), at::ones({5, 2}, at::kLong)}, 2);
    REQUIRE(batches.size() == 3);
    CHECK(batches[2].samples() == 1);
    CHECK(batches[0].arity() == 2);
    CHECK((batches[0].input(1).scalar_type() == at::kLong));
    CHECK_THROWS_WITH_AS(split_batches({at::zeros({5, 3}), at::zeros({4, 3})}, 2),
                         doctest::Contains("input 1 has 4 samples, input 0 has 5"), error);
}

TEST_CASE("LibTorch messages shrink to the line that says something") {
    CHECK(libtorch::detail::first_line("\nExpected a value\n  frame #0") == "Expected a value");
    CHECK(libtorch::detail::first_line("forward(Tensor x) -> Tensor:\nExpected a value of type 'Tensor'\nmore") ==
          "forward(Tensor x) -> Tensor: Expected a value of type 'Tensor'");
    CHECK(libtorch::detail::first_line("") == "");
    CHECK(libtorch::detail::first_line(
              "The following operation failed in the TorchScript interpreter.\nTraceback:\n  x\n"
              "RuntimeError: expected scalar type Float\n") == "RuntimeError: expected scalar type Float");
}

TEST_CASE("calls to parameterless leaf modules are inlined before observers, with the same lowered model to the bit") {
    // prepare() inlines them (leaf_calls.hpp) to spare InsertObservers a preprocess per call;
    // here each model is also prepared the way it was before, without that step, and both are
    // calibrated, converted and lowered alike: the outputs must be equal, not close.
    versatil::testing::require_fashion_mnist();
    const dataset images = load_fashion_mnist(fashion_mnist_split::train, 256);
    const std::vector<batch> calibration = split_batches(images.images.slice(0, 0, 128), 32);
    const std::vector<batch> evaluation = split_batches(images.images.slice(0, 128, 256), 64);
    for (const std::string spec : {"x86_inductor", "xnnpack"}) {
        for (const auto& [name, model] : std::vector<std::pair<std::string, ::torch::jit::Module>>{
                 {"resnet_cnn", resnet_cnn(0)}, {"mobilenet_cnn", mobilenet_cnn(0)}}) {
            CAPTURE(spec);
            CAPTURE(name);
            const quantization_plan plan = plan_for(versatil::testing::whole_model(spec));
            ::torch::jit::Module folded = ::torch::jit::FoldConvBatchNorm(model.clone());
            folded.eval();
            reset_parameters(folded, false);
            std::vector<adjustment> adjustments;
            const libtorch::detail::qconfigs_by_target qconfigs =
                libtorch::detail::qconfigs_for(plan, libtorch::make_observer_or_fake_quantize);
            const ::torch::jit::QConfigDict dict = libtorch::detail::qconfig_dict(folded, plan, qconfigs, adjustments);
            split_shared_types(folded, dict);
            ::torch::jit::Module with_calls = folded.clone();
            CHECK(inline_parameterless_leaf_calls(folded, dict) > 0);

            prepared_model before{model, plan, {}, std::nullopt};
            before.module = ::torch::jit::InsertObservers(with_calls, "forward", dict, true, plan.quant_type);
            prepared_model inlined = prepare(model, plan);
            std::vector<model_outputs> outputs;
            for (prepared_model* prepared : {&before, &inlined}) {
                calibrate(*prepared, calibration, {false});
                const lowered_model lowered = lower(convert(std::move(*prepared)));
                outputs.push_back(run_batches(lowered.module, evaluation));
            }
            REQUIRE(outputs[0].tensors.size() == outputs[1].tensors.size());
            for (std::size_t i = 0; i < outputs[0].tensors.size(); ++i)
                CHECK(at::equal(outputs[0].tensors[i], outputs[1].tensors[i]));
        }
    }
    // A leaf whose path has a QConfig of its own (excluded here) keeps its call.
    ::torch::jit::Module model = mobilenet_cnn(0);
    std::string relu;
    for (const auto& item : model.named_modules())
        if (relu.empty() && libtorch::detail::class_name_contains(item.value, "ReLU")) relu = item.name;
    REQUIRE_FALSE(relu.empty());
    ::torch::jit::QConfigDict dict;
    ::torch::jit::Module plain = model.clone();
    ::torch::jit::Module excluded = model.clone();
    const int all = inline_parameterless_leaf_calls(plain, dict);
    dict[relu] = c10::nullopt;
    CHECK(inline_parameterless_leaf_calls(excluded, dict) == all - 1);
}

TEST_CASE(
    "x86_inductor returns its output layers' results in float, as X86InductorQuantizer does; xnnpack rounds them") {
    // A model nobody here wrote the quantization for: a conv trunk and two linear heads returned
    // as a tuple (tests/zoo/make_zoo.py's multitask, scripted by Python's torch.jit.script).
    const ::torch::jit::Module model = load_model(versatil::testing::zoo() / "multitask.pt");
    const quantize_data data = batches_of(load_data_file(versatil::testing::zoo() / "multitask.data.pt"), 16);
    const model_outputs reference = run_batches(model, data.evaluation);
    const auto distinct_values = [](const at::Tensor& values) {
        return std::get<0>(at::_unique(values.flatten())).numel();
    };
    for (const std::string spec : {"xnnpack", "x86_inductor", "x86_inductor:qat"}) {
        CAPTURE(spec);
        const bool float_outputs = spec == "x86_inductor";
        prepared_model prepared = prepare(model, versatil::testing::whole_model(spec));
        if (spec.ends_with(":qat")) {
            // The ranges QAT's fake-quantize modules learn in training mode, without the steps:
            // what is checked is how convert treats the outputs.
            prepared.module.train();
            for (const batch& b : data.calibration) (void)prepared.module.forward(b.arguments());
            prepared.module.eval();
        } else {
            calibrate(prepared, data.calibration, {false});
        }
        const converted_model converted = convert(std::move(prepared));
        CHECK(versatil::testing::float_output_layers(converted.adjustments) ==
              (float_outputs ? std::vector<std::string>{"classes", "box"} : std::vector<std::string>{}));
        const lowered_model lowered = lower(converted, {.sample = data.calibration.front(), .threads = 1});
        // The heads' weights are unpacked once, when lowering, not on every forward.
        CHECK(count_kind(lowered.module, "quantized::linear_unpack") == 0);
        CHECK(count_kind(lowered.module, "quantized::linear") == (float_outputs ? 0 : 2));
        CHECK(count_kind(lowered.module, "aten::linear") == (float_outputs ? 2 : 0));
        CHECK(count_kind(lowered.module, "quantized::conv2d_relu") == 2);
        const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
        const model_outputs outputs = run_batches(lowered.module, data.evaluation);
        for (const at::Tensor& output : outputs.tensors) {
            // An 8-bit output takes at most 256 values; a float one about as many as it has.
            if (float_outputs) CHECK(distinct_values(output) > output.numel() / 2);
            else CHECK(distinct_values(output) <= 256);
        }
        // What the rounding costs is measured in benchmarks/zoo_peer.py (multitask, x86_inductor:
        // 28.9 dB with it, 32.2 dB without).
        MESSAGE(spec << ": SQNR " << compare_outputs(reference, outputs).overall.sqnr_db << " dB");
    }
}

TEST_CASE("a large output layer keeps its int8 kernel under x86_inductor, and the report says why") {
    // torchvision's MobileNetV2 (tests/zoo/make_zoo.py): a 1280 x 1000 classifier, whose float
    // kernel would double the model's latency at batch 1.
    const ::torch::jit::Module model = load_model(versatil::testing::zoo() / "mobilenet_v2.pt");
    const quantize_data data = batches_of(load_data_file(versatil::testing::zoo() / "mobilenet_v2.data.pt"), 16);
    prepared_model prepared = prepare(model, versatil::testing::whole_model("x86_inductor"));
    calibrate(prepared, {data.calibration.front()}, {false});
    const lowered_model lowered =
        lower(convert(std::move(prepared)), {.sample = data.calibration.front(), .threads = 1});
    std::vector<std::string> rounded;
    for (const adjustment& a : lowered.adjustments)
        if (a.change.find("output the model returns rounded to 8 bits") != std::string::npos) {
            rounded.push_back(a.module_path);
            CHECK(a.change.find("1280000 weights exceed 65536") != std::string::npos);
        }
    CHECK(rounded == std::vector<std::string>{"classifier.1"});
    CHECK(count_kind(lowered.module, "quantized::linear") == 1);
    CHECK(count_kind(lowered.module, "aten::linear") == 0);
}

TEST_CASE("targets and per-layer rows reach layers through methods a model calls on itself") {
    // torchvision's ResNet.forward calls self._forward_impl, nn.Conv2d.forward self._conv_forward,
    // MobileNetV2.forward self._forward_impl: LibTorch names such frames of an inlined call stack
    // "SELF", and a module path built from them ("SELF.layer4.0.conv1.SELF") matched no target.

    // `model` of the zoo, quantized with one target at `path`.
    const auto quantize_at = [](const std::string& model, const std::string& path, std::string_view spec,
                                bool per_layer) {
        return quantize(load_model(versatil::testing::zoo() / (model + ".pt")), compose({{path, backend(spec)}}),
                        batches_of(load_data_file(versatil::testing::zoo() / (model + ".data.pt")), 16),
                        {.per_layer = per_layer, .progress = false});
    };
    const auto says_idle = [](const quantization_report& report) {
        return std::any_of(report.adjustments.begin(), report.adjustments.end(), [](const adjustment& a) {
            return a.change.starts_with("this target quantizes nothing");
        });
    };
    SUBCASE("a dynamic target on a submodule quantizes its linear layers") {
        const quantization_result result = quantize_at("mobilenet_v2", "classifier", "xnnpack:dynamic", false);
        CHECK(result.report.quantized_ops == 1);
        CHECK_FALSE(says_idle(result.report));
    }
    SUBCASE("a dynamic target holding convolutions only quantizes nothing, and the report says so") {
        const quantization_result result = quantize_at("resnet18", "layer4", "xnnpack:dynamic", false);
        CHECK(result.report.quantized_ops == 0);
        CHECK(says_idle(result.report));
    }
    SUBCASE("each per-layer row measures its layer quantized") {
        const quantization_result result = quantize_at("resnet18", "layer4", "x86_inductor", true);
        CHECK(result.report.quantized_ops == 5);
        CHECK_FALSE(says_idle(result.report));
        REQUIRE(result.report.per_layer.size() == 5);
        // Before, every row was float's own 112.65 dB: the layers' quantize ops were not found.
        for (const layer_sqnr& row : result.report.per_layer) {
            INFO(row.name);
            CHECK(row.sqnr_db < 80.0);
            CHECK(row.sqnr_db > result.report.sqnr_db);  // one layer alone costs less than all five
        }
    }
}

TEST_CASE("under x86_inductor a value no conv / linear reads stays float; xnnpack rounds it") {
    // torchvision's ViT (tests/zoo/make_zoo.py): its residual stream (x + pos_embedding, then
    // x + attention(x) and x + mlp(x)) is read by layer_norm and the next sum only. LibTorch
    // rounds each sum to 8 bits, and the class token drowns in the patch tokens' grid.
    // X86InductorQuantizer leaves those sums fp32; XNNPACKQuantizer quantizes add outputs.
    const ::torch::jit::Module model = load_model(versatil::testing::zoo() / "vit.pt");
    const quantize_data data = batches_of(load_data_file(versatil::testing::zoo() / "vit.data.pt"), 16);
    const auto kept_float = [](const quantization_report& report) {
        std::vector<std::string> notes;
        for (const adjustment& a : report.adjustments)
            if (a.change.find("no conv / linear reads kept in float") != std::string::npos) notes.push_back(a.change);
        return notes;
    };
    const quantize_options options{.per_layer = false, .progress = false};
    const quantization_result x86 = quantize(model, versatil::testing::whole_model("x86_inductor"), data, options);
    const quantization_result xnnpack = quantize(model, versatil::testing::whole_model("xnnpack"), data, options);
    const std::vector<std::string> notes = kept_float(x86.report);
    REQUIRE(notes.size() == 1);
    // Counted by hand from make_zoo.py's small_vit (num_layers=2): the sums are x + pos_embedding
    // and each encoder block's two residual sums (1 + 2 x 2 = 5); the layer_norm is the encoder's
    // last, `ln`, which the class-token slice reads before the head (the blocks' ln_1 and ln_2 feed
    // linear layers, so they are quantized).
    CHECK(notes.front().starts_with("6 value(s) no conv / linear reads kept in float (add x5, layer_norm x1)"));
    CHECK(count_kind(x86.model.module, "quantized::add") == 0);
    CHECK(count_kind(x86.model.module, "quantized::layer_norm") <
          count_kind(xnnpack.model.module, "quantized::layer_norm"));
    CHECK(kept_float(xnnpack.report).empty());
    CHECK(count_kind(xnnpack.model.module, "quantized::add") > 0);
    // The layers quantized are the same (x86_inductor's head returns float, float_model_outputs.hpp);
    // the rounding of the residual stream is the difference (9.4 dB on both before; measured
    // 32.4 dB on x86_inductor since).
    CHECK(versatil::testing::float_output_layers(x86.report) == std::vector<std::string>{"heads.head"});
    CHECK(x86.report.quantized_ops + 1 == xnnpack.report.quantized_ops);
    CHECK(x86.report.sqnr_db > 25.0);
    CHECK(xnnpack.report.sqnr_db < 15.0);
}
