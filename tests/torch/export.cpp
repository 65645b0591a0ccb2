// The firmware export's extraction: models scripted by Python's torch
// (tests/firmware/export_models.py), quantized for cortex_m, read back as an integer graph;
// what firmware cannot run is refused naming the op and the module.
#include "doctest_with_torch.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "torch_test_helpers.hpp"
#include "versatil/libtorch/export/extract.hpp"
#include "versatil/libtorch/export/firmware.hpp"
#include <torch/csrc/jit/passes/fold_conv_bn.h>

#include "versatil/libtorch/files/save.hpp"
#include "versatil/libtorch/analysis/measure.hpp"
#include "versatil/libtorch/plan/target_spec.hpp"

namespace {

using namespace versatil;
using namespace versatil::libtorch;

// The models of export_models.py, scripted once per test run.
const std::filesystem::path& scripted_models() {
    static const versatil::testing::scratch_directory directory("versatil-export-models-");
    static const bool written = [] {
        versatil::testing::require_python_torch();
        const std::string command = std::string(versatil::testing::torch_python) + " " VERSATIL_SOURCE_ROOT
                                    "/tests/firmware/export_models.py " + directory.path.string() + " > /dev/null";
        return std::system(command.c_str()) == 0;
    }();
    REQUIRE_MESSAGE(written, "tests/firmware/export_models.py failed");
    return directory.path;
}

struct exported {
    ::torch::jit::Module model;
    lowered_model lowered;
    batch sample;
};

at::Tensor random_inputs(std::vector<std::int64_t> shape, std::uint64_t seed) {
    const at::Generator generator = at::detail::createCPUGenerator(seed);
    return at::randn(shape, generator);
}

exported quantized(const std::string& name, std::vector<std::int64_t> input_shape,
                   const std::vector<std::string>& targets = {"=cortex_m"}) {
    const ::torch::jit::Module model = load_model(scripted_models() / (name + ".pt"));
    std::vector<runtime_target> parsed;
    for (const std::string& target : targets) parsed.push_back(parse_target(target));
    const auto quantizer = runtime_quantizer::compose(std::move(parsed));
    REQUIRE(quantizer.has_value());
    input_shape.insert(input_shape.begin(), 64);
    quantize_data data;
    data.calibration = split_batches(random_inputs(input_shape, 1), 16);
    lowered_model lowered = quantize_model(model, *quantizer, data, {.progress = false});
    return {model, std::move(lowered), batch(random_inputs(input_shape, 2).slice(0, 0, 4))};
}

codegen::integer_graph extract(const exported& e) { return extract_integer_graph(e.model, e.lowered, e.sample); }

std::string kinds(const codegen::integer_graph& graph) {
    std::string result;
    for (const codegen::integer_op& op : graph.ops) {
        static constexpr const char* names[] = {"conv2d",     "linear",     "add",               "clamp",
                                                "max_pool2d", "avg_pool2d", "global_avg_pool2d", "flatten"};
        result += (result.empty() ? "" : " ") + std::string(names[static_cast<int>(op.kind)]);
    }
    return result;
}

std::string modules(const codegen::integer_graph& graph) {
    std::string result;
    for (const codegen::integer_op& op : graph.ops)
        result += (result.empty() ? "" : " ") + (op.module.empty() ? std::string("(forward)") : op.module);
    return result;
}

const codegen::tensor_shape& shape(const codegen::integer_graph& graph, int tensor) {
    return graph.tensors.at(static_cast<std::size_t>(tensor)).shape;
}

// The message of the unsupported_export error `extract` throws.
std::string refusal(const exported& e) {
    try {
        (void)extract(e);
    } catch (const error& failure) {
        CHECK(failure.kind() == error_kind::unsupported_export);
        return failure.what();
    }
    FAIL("the export was not refused");
    return {};
}

}  // namespace

TEST_CASE("a depthwise-separable CNN with a residual add: every op, shape, window and module") {
    const exported e = quantized("separable", {3, 32, 32});
    const codegen::integer_graph graph = extract(e);
    CHECK(kinds(graph) == "conv2d max_pool2d conv2d conv2d add conv2d clamp avg_pool2d flatten linear linear");
    CHECK(modules(graph) == "stem.0 pool block.depthwise block.pointwise block down.0 down.2 smooth (forward) fc1 fc2");

    REQUIRE(graph.input == 0);
    CHECK(shape(graph, graph.input) == codegen::tensor_shape{3, 32, 32});
    const auto& ops = graph.ops;
    // The stem: 3x3, stride 2, padding 1, relu fused; weights [8][3][3][3], per-channel scales.
    CHECK(ops[0].inputs == std::vector<int>{graph.input});
    CHECK(shape(graph, ops[0].output) == codegen::tensor_shape{8, 16, 16});
    CHECK((ops[0].window.kernel_h == 3 && ops[0].window.stride_h == 2 && ops[0].window.padding_w == 1));
    CHECK((ops[0].relu && ops[0].groups == 1 && ops[0].weights.size() == 8U * 3 * 3 * 3));
    CHECK(ops[0].weight_scales.size() == 8);
    CHECK(ops[0].bias.size() == 8);  // batch norm folded into a bias
    // ResNet's max pool: 3x3, stride 2, padding 1.
    CHECK((ops[1].window.kernel_w == 3 && ops[1].window.stride_w == 2 && ops[1].window.padding_h == 1));
    CHECK(shape(graph, ops[1].output) == codegen::tensor_shape{8, 8, 8});
    // Depthwise: groups == channels, weights [8][1][3][3]; then the pointwise 1x1 without relu.
    CHECK((ops[2].groups == 8 && ops[2].weights.size() == 8U * 9 && ops[2].relu));
    CHECK((ops[3].groups == 1 && ops[3].window.kernel_h == 1 && !ops[3].relu && ops[3].weights.size() == 64U));
    // The residual: the pointwise output plus the block's input (the max pool's output), relu fused.
    CHECK(ops[4].inputs == std::vector<int>{ops[3].output, ops[1].output});
    CHECK(ops[4].relu);
    CHECK(shape(graph, ops[5].output) == codegen::tensor_shape{16, 4, 4});
    // ReLU6 is hardtanh(0, 6): a clamp with its real bounds.
    CHECK((ops[6].clamp_min == 0.0 && ops[6].clamp_max == 6.0));
    CHECK((ops[7].window.kernel_h == 2 && ops[7].window.stride_h == 2 && ops[7].count_include_pad));
    CHECK(shape(graph, ops[7].output) == codegen::tensor_shape{16, 2, 2});
    // The view to one row: C, H, W order, the same bytes.
    CHECK(shape(graph, ops[8].output) == codegen::tensor_shape{64, 1, 1});
    // linear + relu fused; the head unfused; weights [out][in].
    CHECK((ops[9].relu && ops[9].weights.size() == 12U * 64 && ops[9].weight_scales.size() == 12));
    CHECK((!ops[10].relu && ops[10].weights.size() == 10U * 12));
    CHECK(graph.output == ops[10].output);
    CHECK(shape(graph, graph.output) == codegen::tensor_shape{10, 1, 1});

    // Every op reads tensors made before it, and writes a tensor of its own.
    std::vector<bool> made(graph.tensors.size(), false);
    made[static_cast<std::size_t>(graph.input)] = true;
    for (const codegen::integer_op& op : graph.ops) {
        for (int input : op.inputs) CHECK(made.at(static_cast<std::size_t>(input)));
        CHECK_FALSE(made.at(static_cast<std::size_t>(op.output)));
        made[static_cast<std::size_t>(op.output)] = true;
    }
    // int8 activations: positive scales, zero points within int8. Weights symmetric in [-127, 127].
    for (const codegen::activation_tensor& tensor : graph.tensors) {
        CHECK(tensor.scale > 0.0);
        CHECK((tensor.zero_point >= -128 && tensor.zero_point <= 127));
    }
    for (const codegen::integer_op& op : graph.ops) {
        for (std::int8_t w : op.weights) CHECK(w >= -127);
        for (double s : op.weight_scales) CHECK(s > 0.0);
    }
}

TEST_CASE("the exported quantization is LibTorch's: input qparams and a conv's weights as its engine holds them") {
    const exported e = quantized("separable", {3, 32, 32});
    const codegen::integer_graph graph = extract(e);
    // The model's own quantize_per_tensor of its input, as quint8: the int8 zero point is 128 lower.
    const engine_scope engine(e.lowered.plan.engine);
    const auto code = e.lowered.module.get_method("forward").graph();
    for (const ::torch::jit::Node* node : code->nodes()) {
        if (node->kind() != c10::Symbol::fromQualString("aten::quantize_per_tensor")) continue;
        CHECK(graph.tensors[0].scale ==
              doctest::Approx(::torch::jit::toIValue(node->input(1))->toDouble()).epsilon(1e-12));
        CHECK(graph.tensors[0].zero_point == ::torch::jit::toIValue(node->input(2))->toInt() - 128);
        CHECK(::torch::jit::toIValue(node->input(3))->toInt() == static_cast<std::int64_t>(c10::kQUInt8));
    }
    // The stem's weights dequantized are the batch-norm-folded float weights within half a
    // step, and its bias is the folded bias.
    ::torch::jit::Module clone = e.model.clone();
    clone.eval();
    const ::torch::jit::Module stem =
        ::torch::jit::FoldConvBatchNorm(clone).attr("stem").toModule().attr("0").toModule();
    const at::Tensor weight = stem.attr("weight").toTensor().contiguous();
    const at::Tensor bias = stem.attr("bias").toTensor();
    const codegen::integer_op& conv = graph.ops[0];
    double worst = 0.0;
    for (std::int64_t channel = 0; channel < 8; ++channel) {
        const double scale = conv.weight_scales[static_cast<std::size_t>(channel)];
        for (std::int64_t i = 0; i < 27; ++i) {
            const double real = conv.weights[static_cast<std::size_t>(channel * 27 + i)] * scale;
            worst = std::max(worst, std::abs(real - weight[channel].flatten()[i].item<double>()) / scale);
        }
        CHECK(conv.bias[static_cast<std::size_t>(channel)] ==
              doctest::Approx(bias[channel].item<double>()).epsilon(1e-6));
    }
    CHECK(worst <= 0.5 + 1e-4);
}

TEST_CASE("dilation, a separate relu, adaptive pooling by a factor and to 1x1, clamp, flatten") {
    const exported e = quantized("pooled", {3, 32, 32});
    const codegen::integer_graph graph = extract(e);
    // flatten of a 1x1 map is the same tensor: no op.
    CHECK(kinds(graph) == "conv2d max_pool2d clamp avg_pool2d clamp global_avg_pool2d linear");
    CHECK(modules(graph) == "conv pool act area (forward) avgpool fc");
    const auto& ops = graph.ops;
    CHECK((ops[0].window.dilation_h == 2 && ops[0].window.padding_w == 2 && !ops[0].relu));
    CHECK(shape(graph, ops[0].output) == codegen::tensor_shape{8, 32, 32});
    CHECK(ops[2].clamp_min == 0.0);  // relu: no upper bound but the int8 range's
    const codegen::activation_tensor& relu_out = graph.tensors.at(static_cast<std::size_t>(ops[2].output));
    CHECK(ops[2].clamp_max == doctest::Approx(relu_out.scale * (127 - relu_out.zero_point)));
    // AdaptiveAvgPool2d(4) on 16x16 is a 4x4 average pool of stride 4.
    CHECK((ops[3].window.kernel_h == 4 && ops[3].window.stride_w == 4 && ops[3].window.padding_h == 0));
    CHECK(shape(graph, ops[3].output) == codegen::tensor_shape{8, 4, 4});
    CHECK((ops[4].clamp_min == -1.0 && ops[4].clamp_max == 2.0));
    CHECK(shape(graph, ops[5].output) == codegen::tensor_shape{8, 1, 1});
    CHECK(ops[6].inputs == std::vector<int>{ops[5].output});
}

TEST_CASE("a model of rows: linear layers on a [1, F] input") {
    const exported e = quantized("mlp", {20});
    const codegen::integer_graph graph = extract(e);
    CHECK(kinds(graph) == "linear linear");
    CHECK(shape(graph, graph.input) == codegen::tensor_shape{20, 1, 1});
    CHECK(graph.ops[0].relu);  // linear + relu fused
    CHECK(graph.ops[0].module == "hidden");
    CHECK(graph.ops[1].module == "out");
    CHECK(shape(graph, graph.output) == codegen::tensor_shape{4, 1, 1});
}

TEST_CASE("per_tensor weights: one scale repeated per output channel") {
    const exported e = quantized("mlp", {20}, {"=cortex_m:per_tensor"});
    const codegen::integer_graph graph = extract(e);
    const std::vector<double>& scales = graph.ops[0].weight_scales;
    REQUIRE(scales.size() == 32);
    CHECK(std::all_of(scales.begin(), scales.end(), [&](double s) { return s == scales.front(); }));
}

TEST_CASE("a calibration method chooses cortex_m's activation scales, and the export takes them") {
    const codegen::integer_graph histogram = extract(quantized("separable", {3, 32, 32}));
    const codegen::integer_graph minmax =
        extract(quantized("separable", {3, 32, 32}, {"=cortex_m:calibration=minmax"}));
    CHECK(kinds(minmax) == kinds(histogram));
    REQUIRE(minmax.tensors.size() == histogram.tensors.size());
    // The same weights and data: only the observed ranges differ, so some activation scale does.
    std::size_t differ = 0;
    for (std::size_t i = 0; i < minmax.tensors.size(); ++i)
        differ += minmax.tensors[i].scale != histogram.tensors[i].scale;
    CAPTURE(minmax.tensors.size());
    CHECK(differ > 0);
    CHECK(minmax.ops.front().weight_scales == histogram.ops.front().weight_scales);
}

TEST_CASE("an op firmware cannot run is refused, naming the op and the module") {
    const std::string gelu = refusal(quantized("gate", {3, 16, 16}));
    CAPTURE(gelu);
    CHECK(gelu.find("cannot export for firmware: op 'aten::gelu' in module 'act'") != std::string::npos);

    const std::string encoder = refusal(quantized("encoder", {8, 16}));
    CAPTURE(encoder);
    // Refused for the block's first op that firmware cannot run, not for a shape on the way.
    CHECK(encoder.find("cannot export for firmware: op '") != std::string::npos);
    // The first such op is the attention's float in-projection, which LibTorch keeps no module path
    // for: the refusal names the module it comes after (the attention's transpose, now exported).
    CHECK(encoder.find(" module 'encoder") != std::string::npos);
}

TEST_CASE("a layer left in float is refused, naming it") {
    const std::string message = refusal(quantized("mlp", {20}, {"=cortex_m", "out=none"}));
    CAPTURE(message);
    CHECK(message.find("op 'aten::linear' in module 'out' runs in float") != std::string::npos);
}

TEST_CASE("a model quantized for the CPU is not exported") {
    const std::string message = refusal(quantized("mlp", {20}, {"=xnnpack"}));
    CHECK(message.find("quantize it for a microcontroller (a cortex_m target") != std::string::npos);
}

TEST_CASE("cortex_m evaluates on QNNPACK with quint8 activations, per-channel linear weights included") {
    const exported e = quantized("mlp", {20});
    CHECK(engine_name(e.lowered.plan.engine) == "qnnpack");
    CHECK(e.lowered.plan.devices == device_set{device_type::cpu});
    CHECK(e.lowered.adjustments.empty());  // no per-tensor fallback for linear layers
    const codegen::integer_graph graph = extract(e);
    const std::vector<double>& scales = graph.ops[0].weight_scales;
    CHECK(std::any_of(scales.begin(), scales.end(), [&](double s) { return s != scales.front(); }));
}

TEST_CASE("a ReLU6 after a conv runs in the right layout on QNNPACK: the lowered model follows the float one") {
    const exported e = quantized("separable", {3, 32, 32});
    bool noted = false;
    for (const adjustment& a : e.lowered.adjustments)
        noted = noted || a.change.find("1 clamp(s) (ReLU6, hardtanh, clamp) read a contiguous copy") == 0;
    CHECK(noted);
    const engine_scope engine(e.lowered.plan.engine);
    const std::vector<batch> inputs{batch(random_inputs({64, 3, 32, 32}, 3))};
    ::torch::jit::Module float_model = e.model.clone();
    float_model.eval();
    const double sqnr =
        compare_outputs(run_batches(float_model, inputs), run_batches(e.lowered.module, inputs)).overall.sqnr_db;
    MESSAGE("separable: lowered vs float SQNR " << sqnr << " dB");
    // Measured 42.3 dB; 14.3 dB when the clamp reads channels-last data as contiguous (the
    // 2x2 average pool after it blurs the scramble, so it is not worse). The floor separates the
    // two: 35 dB is 20 dB above the fault it is there to catch and 7 dB under the measured figure
    // (5 times the noise power), room for another CPU's kernels, not for the fault.
    CHECK(sqnr > 35.0);
}

TEST_CASE("export_firmware: a header in the namespace, its plan's figures, and the runtime against LibTorch") {
    const exported e = quantized("separable", {3, 32, 32});
    const std::vector<batch> evaluation = split_batches(random_inputs({100, 3, 32, 32}, 4), 32);
    const firmware_export done = export_firmware(e.model, e.lowered, evaluation, "models::separable");
    CHECK(done.header.find("namespace models::separable {") != std::string::npos);
    CHECK(done.header.find("struct model {") != std::string::npos);
    const firmware_report& r = done.report;
    CHECK(r.namespace_name == "models::separable");
    CHECK(r.header_bytes == static_cast<std::int64_t>(done.header.size()));
    CHECK((r.arena_lower_bound_bytes > 0 && r.arena_bytes >= r.arena_lower_bound_bytes));
    CHECK(r.greedy_planner_bytes >= r.arena_lower_bound_bytes);
    std::int64_t weights = 0;
    for (const codegen::integer_op& op : done.graph.ops) weights += static_cast<std::int64_t>(op.weights.size());
    CHECK(r.parameter_bytes > weights);  // weights, plus biases, multipliers and shifts
    CHECK(r.compared_samples == 100);
    CHECK(r.compared_elements == 100 * 10);
    MESSAGE("separable: top-1 agreement " << r.top1_agreement << ", max " << r.max_lsb_diff << " LSB, "
                                          << r.differing_elements << " of " << r.compared_elements << " differ");
    // Measured: every output equal (0 of 1000 differ). It was 2 LSB, 407 of 1000, until average
    // pooling rounded its ties as LibTorch does (to even; TFLite rounds them away from zero): the
    // 2x2 pool here ties on a quarter of its sums, and the 1-LSB steps grew through two linears.
    CHECK(r.top1_agreement >= 0.99);
    CHECK(r.max_lsb_diff <= 1);
}

TEST_CASE("export_firmware refuses a model firmware cannot run, and a namespace C++ does not take") {
    const exported gate = quantized("gate", {3, 16, 16});
    const std::vector<batch> gate_data{gate.sample};
    CHECK_THROWS_WITH_AS(export_firmware(gate.model, gate.lowered, gate_data, "gate"),
                         doctest::Contains("op 'aten::gelu' in module 'act'"), error);
    const exported mlp = quantized("mlp", {20});
    const std::vector<batch> mlp_data{mlp.sample};
    try {
        (void)export_firmware(mlp.model, mlp.lowered, mlp_data, "class");
        FAIL("a keyword was taken as a namespace");
    } catch (const error& failure) {
        CHECK(failure.kind() == error_kind::invalid_argument);
        CHECK(std::string(failure.what()).find("namespace 'class' is not a C++ namespace name") != std::string::npos);
    }
}
