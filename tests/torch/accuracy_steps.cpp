// The accuracy steps of the cle, bias_correction and gptq options, on models trained on Fashion-MNIST
// (Debian's dataset-fashion-mnist) and on one scripted in Python: cross-layer equalization keeps
// the float model's function and equalizes paired weight ranges, each option changes what is
// quantized, bias correction removes the mean output error, GPTQ keeps its weights on convert's
// grid and fits each layer's output better, and the caller's model is left as it was. Figures
// are printed (torch_tests -sf='*accuracy_steps.cpp' -s) for the notes and RESULTS.md.
#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"

#include <torch/csrc/jit/passes/fold_conv_bn.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "versatil/libtorch.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {

using versatil::testing::whole_model;

using versatil::testing::quantize_with;
using versatil::testing::trained_classifier;
using versatil::testing::trained_fashion_mnist;

// "x86_inductor" + "cle" -> "x86_inductor:cle"; "xnnpack:per_tensor" + "cle" -> "xnnpack:per_tensor,cle".
std::string with_options(const std::string& spec, const std::string& options) {
    if (options.empty()) return spec;
    return spec + (spec.find(':') == std::string::npos ? ":" : ",") + options;
}

// Every parameter and buffer by name, copied.
std::map<std::string, at::Tensor> tensors_of(const ::torch::jit::Module& model) {
    std::map<std::string, at::Tensor> tensors;
    for (const auto& item : model.named_parameters()) tensors.emplace(item.name, item.value.clone());
    for (const auto& item : model.named_buffers()) tensors.emplace("buffer " + item.name, item.value.clone());
    return tensors;
}

// The model as prepare sees it before observers: eval mode, batch norm folded.
::torch::jit::Module folded(const ::torch::jit::Module& model) {
    ::torch::jit::Module copy = model.clone();
    copy.eval();
    return ::torch::jit::FoldConvBatchNorm(copy);
}

// How well one per-tensor scale fits a layer's output channels: the mean over channels of the
// channel's largest |weight| over the tensor's. 1 when every channel spans the whole range.
double per_tensor_fit(const at::Tensor& weight) {
    const at::Tensor ranges = weight.abs().reshape({weight.size(0), -1}).amax(1);
    return (ranges / ranges.max()).mean().item<double>();
}

// Each converted layer's weight scales (the attributes convert stores for the quantized weights).
std::map<std::string, at::Tensor> weight_scales(const ::torch::jit::Module& converted) {
    std::map<std::string, at::Tensor> scales;
    for (const auto& item : converted.named_modules())
        for (const auto& attribute : item.value.named_attributes(/*recurse=*/false))
            if (attribute.name.starts_with("weight") && attribute.name.find("_scale_") != std::string::npos)
                scales.emplace(item.name + "." + attribute.name,
                               attribute.value.isTensor() ? attribute.value.toTensor().clone()
                                                          : at::tensor(attribute.value.toDouble()));
    return scales;
}

// Activation scales of a converted model (quantize_per_tensor qparams stored on the modules).
std::map<std::string, double> activation_scales(const ::torch::jit::Module& converted) {
    std::map<std::string, double> scales;
    for (const auto& item : converted.named_modules())
        for (const auto& attribute : item.value.named_attributes(/*recurse=*/false))
            if (!attribute.name.starts_with("weight") && attribute.name.ends_with("_scale_0") &&
                attribute.value.isDouble())
                scales.emplace(item.name + "." + attribute.name, attribute.value.toDouble());
    return scales;
}

converted_model calibrated_and_converted(const ::torch::jit::Module& model, std::string_view spec,
                                         const std::vector<batch>& calibration) {
    prepared_model prepared = prepare(model, whole_model(spec));
    calibrate(prepared, calibration, {false});
    return convert(prepared);
}

// The mean signed output error per output (logit), averaged in absolute value: what bias
// correction removes, measured on the held-out test images.
double mean_output_bias(const trained_classifier& t, const lowered_model& lowered) {
    const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
    const at::Tensor reference = run_batches(t.model, t.data.evaluation).tensors.front().to(at::kDouble);
    const at::Tensor quantized =
        run_batches(lowered.module.deepcopy(), t.data.evaluation).tensors.front().to(at::kDouble);
    return (quantized - reference).mean(0).abs().mean().item<double>();
}

}  // namespace

TEST_CASE("cross-layer equalization keeps the float outputs and equalizes the paired weight ranges") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mobilenet");
    ::torch::jit::Module model = folded(t.model);
    const layer_graph graph = find_layer_graph(model);
    // stem -> dw1 -> pw1 -> dw2 -> pw2 -> dw3 -> pw3, all through ReLU modules; the fc follows pooling.
    REQUIRE(graph.links.size() == 6);
    CHECK(graph.links.front().producer == "features.0.0");
    CHECK(graph.links.front().consumer == "features.1.depthwise");
    CHECK(graph.links.back().consumer == "features.3.pointwise");
    for (const layer_link& link : graph.links) CHECK(link.activation == activation_kind::relu);

    std::map<std::string, double> fit_before;
    for (const weighted_layer& layer : graph.layers)
        fit_before[layer.path] = per_tensor_fit(find_submodule(model, layer.path).attr("weight").toTensor());
    const at::Tensor images = at::cat({t.data.evaluation[0].input(0), t.data.evaluation[1].input(0)});
    const at::Tensor before = model.forward({images}).toTensor();
    int sweeps = 0;
    const auto chains = equalize_links(model, graph.links, [](const auto&, const auto&) { return true; }, {}, &sweeps);
    const at::Tensor after = model.forward({images}).toTensor();
    REQUIRE(chains.size() == 1);
    CHECK(chains.front().size() == 7);

    // Exact in float64; what is left is float32 rounding: each rescaled weight is rounded once
    // (relative error <= 2^-24 = 6e-8) and the convolutions sum in another order over operands of
    // another size. Seven layers deep, that stays within a few 1e-7 of the largest logit; 1e-5
    // leaves a margin of ten over the measured figure and is far below any quantization error
    // (int8 steps are ~4e-3 of a range).
    const double relative = ((after - before).abs().max() / before.abs().max()).item<double>();
    MESSAGE("CLE: " << sweeps << " sweeps; largest output change " << relative << " of the largest logit");
    CHECK(relative < 1e-5);
    CHECK(at::argmax(after, 1).equal(at::argmax(before, 1)));

    // Equalized: paired channels have the same range (to the sweeps' tolerance) ...
    for (const layer_link& link : graph.links) {
        CAPTURE(link.producer);
        const at::Tensor w1 = find_submodule(model, link.producer).attr("weight").toTensor().to(at::kDouble);
        const at::Tensor w2 = find_submodule(model, link.consumer).attr("weight").toTensor().to(at::kDouble);
        const std::int64_t groups = w1.size(0) / w2.size(1);
        const at::Tensor r1 = w1.abs().reshape({w1.size(0), -1}).amax(1);
        const at::Tensor r2 =
            w2.abs().reshape({groups, w2.size(0) / groups, w2.size(1), -1}).amax({1, 3}).reshape({-1});
        CHECK(((r1 - r2).abs() / r1).max().item<double>() < 1e-4);
    }
    // ... and a per-tensor scale fits the channels better, most where it fitted worst.
    std::string fits;
    double worst_before = 1.0, worst_after = 1.0;
    for (const weighted_layer& layer : graph.layers) {
        const double fit = per_tensor_fit(find_submodule(model, layer.path).attr("weight").toTensor());
        fits += layer.path + " " + std::to_string(fit_before[layer.path]) + " -> " + std::to_string(fit) + "; ";
        worst_before = std::min(worst_before, fit_before[layer.path]);
        if (layer.path != "fc") worst_after = std::min(worst_after, fit);
    }
    MESSAGE("mean channel range / tensor range: " << fits);
    CHECK(worst_after > worst_before);
}

TEST_CASE("each option changes what is quantized") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mobilenet");
    const converted_model plain = calibrated_and_converted(t.model, "xnnpack:per_tensor", t.data.calibration);
    const converted_model equalized = calibrated_and_converted(t.model, "xnnpack:per_tensor,cle", t.data.calibration);

    // cle: the weights' qparams and the activations' ranges between equalized layers move.
    const auto plain_weights = weight_scales(plain.module), equalized_weights = weight_scales(equalized.module);
    REQUIRE(plain_weights.size() == 8);
    REQUIRE(equalized_weights.size() == plain_weights.size());
    int weights_changed = 0;
    for (const auto& [name, scale] : plain_weights)
        weights_changed += at::equal(scale, equalized_weights.at(name)) ? 0 : 1;
    CHECK(weights_changed == 7);  // every equalized conv; the fc is in no chain
    const auto plain_activations = activation_scales(plain.module),
               equalized_activations = activation_scales(equalized.module);
    int activations_changed = 0;
    for (const auto& [name, scale] : plain_activations)
        activations_changed += equalized_activations.count(name) && equalized_activations.at(name) != scale ? 1 : 0;
    MESSAGE("cle changed " << weights_changed << " weight scales and " << activations_changed << " of "
                           << plain_activations.size() << " activation scales");
    CHECK(activations_changed > 0);

    // bias_correction: after calibration, the biases of the converted model.
    converted_model corrected =
        calibrated_and_converted(t.model, "xnnpack:per_tensor,bias_correction", t.data.calibration);
    REQUIRE(corrected.folded_model.has_value());
    CHECK_FALSE(plain.folded_model.has_value());  // kept only where a target corrects biases
    ::torch::jit::Module before = corrected.module.clone();
    correct_biases_for_targets(corrected, t.data.calibration);
    int biases_changed = 0;
    for (const char* path : {"features.0.0", "features.1.depthwise", "features.2.pointwise", "fc"})
        biases_changed += at::equal(find_submodule(before, path).attr("bias").toTensor(),
                                    find_submodule(corrected.module, path).attr("bias").toTensor())
                              ? 0
                              : 1;
    CHECK(biases_changed == 4);
    CHECK(weight_scales(corrected.module).size() == 8);
    REQUIRE_FALSE(corrected.adjustments.empty());
    MESSAGE(corrected.adjustments.back().change);
    CHECK(corrected.adjustments.back().change.starts_with(
        "bias correction: 8 layer(s) corrected on 256 of the 512 calibration samples"));
}

TEST_CASE("bias correction lowers the mean output error on held-out data" * doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    for (const std::string kind : {"mobilenet", "cnn"}) {
        const trained_classifier& t = trained_fashion_mnist(kind);
        for (const std::string spec : {"xnnpack:per_tensor", "x86_inductor"}) {
            CAPTURE(kind);
            CAPTURE(spec);
            const runtime_quantizer plain = whole_model(spec),
                                    corrected = whole_model(with_options(spec, "bias_correction"));
            const double without = mean_output_bias(t, quantize_model(t.model, plain, t.data, {.progress = false}));
            const double with = mean_output_bias(t, quantize_model(t.model, corrected, t.data, {.progress = false}));
            MESSAGE(kind << " " << spec << ": mean |E[q - f]| per logit " << without << " -> " << with);
            CHECK(with < without);
        }
    }
}

TEST_CASE("SQNR with and without cle and bias_correction, where per-tensor weights meet depthwise layers" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mobilenet");
    std::map<std::string, double> sqnr;
    for (const std::string base : {"xnnpack:per_tensor", "x86_inductor", "xnnpack"})
        for (const std::string options : {"", "cle", "bias_correction", "cle,bias_correction"}) {
            const std::string spec = with_options(base, options);
            const quantization_report report = quantize_with(t, spec);
            sqnr[spec] = report.sqnr_db;
            MESSAGE(spec << ": SQNR " << report.sqnr_db << " dB, top-1 " << *report.quantized_accuracy
                                   << " (float " << *report.float_accuracy << "), quantize " << report.quantize_seconds
                                   << " s");
            // Every op quantized; x86_inductor returns its fc's output in float (float_model_outputs.hpp).
            const std::size_t float_outputs = versatil::testing::float_output_layers(report).size();
            CHECK(float_outputs == (base == "x86_inductor" ? 1U : 0U));
            CHECK(report.quantized_ops + static_cast<std::int64_t>(float_outputs) == report.quantizable_ops);
            CHECK(*report.quantized_accuracy >= *report.float_accuracy - 0.01);
        }
    // Per-tensor weights are where the two steps matter. cle alone is not pinned here: two
    // trainings of this model that differ only in BLAS rounding (reference BLAS, OpenBLAS) gave
    // cle alone +4.1 and +0.1 dB on xnnpack:per_tensor and -0.8 and +7.2 dB on x86_inductor, a
    // property of the trained weights; cle with bias correction gave +5.8 and +3.9 dB.
    CHECK(sqnr["xnnpack:per_tensor,cle,bias_correction"] > sqnr["xnnpack:per_tensor"] + 1.0);
}

// The grid LibTorch's convert will quantize a prepared layer's weight on: its weight observer's
// qparams (the child the plan marks as observing a parameter).
std::pair<at::Tensor, at::Tensor> weight_qparams(const ::torch::jit::Module& layer) {
    std::optional<::torch::jit::Module> observer = libtorch::detail::weight_observer(layer);
    REQUIRE_MESSAGE(observer.has_value(), "no weight observer on the layer");
    const auto qparams = observer->run_method("calculate_qparams").toTuple();
    return {qparams->elements()[0].toTensor().to(at::kDouble), qparams->elements()[1].toTensor().to(at::kDouble)};
}

TEST_CASE("gptq's unfolded inputs times the weight matrix are the convolution") {
    at::manual_seed(3);
    struct conv_case {
        std::vector<std::int64_t> kernel, stride, padding, dilation;
        std::int64_t groups, in, out;
        bool one_d;
    };
    for (const conv_case& c : {conv_case{{3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 4, 6, false},
                               conv_case{{3, 3}, {2, 2}, {1, 1}, {1, 1}, 8, 8, 8, false},    // depthwise, strided
                               conv_case{{3, 2}, {1, 2}, {2, 0}, {2, 1}, 2, 4, 6, false},    // uneven, dilated, grouped
                               conv_case{{1, 5}, {1, 2}, {0, 2}, {1, 1}, 1, 3, 5, true}}) {  // 1-d as height 1
        const at::Tensor input = c.one_d ? at::randn({2, c.in, 11}) : at::randn({2, c.in, 9, 10});
        std::vector<std::int64_t> weight_shape{c.out, c.in / c.groups};
        for (std::size_t d = c.one_d ? 1 : 0; d < c.kernel.size(); ++d) weight_shape.push_back(c.kernel[d]);
        const at::Tensor weight = at::randn(weight_shape);
        const auto last = [&](const std::vector<std::int64_t>& v) {
            return c.one_d ? std::vector<std::int64_t>{v.back()} : v;
        };
        const at::Tensor expected =
            c.one_d ? at::conv1d(input, weight, {}, last(c.stride), last(c.padding), last(c.dilation), c.groups)
                    : at::conv2d(input, weight, {}, c.stride, c.padding, c.dilation, c.groups);
        const at::Tensor rows = libtorch::detail::unfolded_rows(
            input, {c.kernel, c.stride, c.padding, c.dilation, c.groups, c.one_d});  // [g, N x L, width]
        const at::Tensor matrices = weight.reshape({c.groups, c.out / c.groups, -1});
        const at::Tensor product = at::bmm(rows, matrices.transpose(1, 2));  // [g, N x L, out / g]
        const std::int64_t samples = input.size(0), positions = rows.size(1) / samples;
        const at::Tensor as_conv = product.view({c.groups, samples, positions, -1}).permute({1, 0, 3, 2}).reshape(
            {samples, c.out, positions});
        CHECK(at::allclose(as_conv, expected.reshape({samples, c.out, -1}), 1e-4, 1e-4));
    }
}

TEST_CASE(
    "gptq puts every weight on its observer's grid and fits each layer's output better than rounding to nearest") {
    versatil::testing::require_fashion_mnist();
    // mobilenet: depthwise (one H per channel) and pointwise convolutions, a linear head; mlp:
    // linear layers. Per-channel and per-tensor grids, signed and unsigned.
    for (const auto& [kind, spec] :
         {std::pair{"mobilenet", "x86_inductor:gptq"}, std::pair{"mobilenet", "xnnpack:per_tensor,gptq"},
          std::pair{"mlp", "xnnpack:gptq"}}) {
        CAPTURE(kind);
        CAPTURE(spec);
        const trained_classifier& t = trained_fashion_mnist(kind);
        prepared_model prepared = prepare(t.model, whole_model(spec));
        calibrate(prepared, t.data.calibration, {false});
        REQUIRE(prepared.folded_model.has_value());
        std::map<std::string, at::Tensor> original;
        std::map<std::string, std::pair<at::Tensor, at::Tensor>> grids;
        for (const weighted_layer& layer : find_layer_graph(*prepared.folded_model).layers) {
            const ::torch::jit::Module module = find_submodule(prepared.module, layer.path);
            original.emplace(layer.path, module.attr("weight").toTensor().clone());
            grids.emplace(layer.path, weight_qparams(module));
        }
        const rounding_summary summary = round_weights(prepared, *prepared.folded_model, t.data.calibration,
                                                   [](const std::string&) { return true; });
        CHECK(summary.samples == 256);
        CHECK(summary.skipped.empty());
        REQUIRE(summary.rounded.size() == original.size());
        double nearest = 0.0, rounded = 0.0;
        for (const rounded_layer& layer : summary.rounded) {
            CAPTURE(layer.path);
            const ::torch::jit::Module module = find_submodule(prepared.module, layer.path);
            const auto [scale, zero_point] = weight_qparams(module);
            // The observer's range is the original weight's, so convert quantizes on this grid...
            CHECK(at::equal(scale, grids.at(layer.path).first));
            CHECK(at::equal(zero_point, grids.at(layer.path).second));
            // ...and every rounded weight is on it: convert gets back exactly GPTQ's integers.
            const at::Tensor weight = module.attr("weight").toTensor().to(at::kDouble);
            const std::vector<std::int64_t> per_row{-1, 1};
            const at::Tensor rows = weight.reshape({weight.size(0), -1});
            const at::Tensor levels = rows / scale.view(per_row) + zero_point.view(per_row);
            CHECK((levels - levels.round()).abs().max().item<double>() < 1e-3);
            const at::Tensor nearest_levels =
                (original.at(layer.path).to(at::kDouble).reshape({weight.size(0), -1}) / scale.view(per_row)).round() +
                zero_point.view(per_row);
            const auto moved = (levels.round() != nearest_levels).sum().item<std::int64_t>();
            MESSAGE(layer.path << ": " << moved << " of " << levels.numel()
                               << " weights off their nearest level; output error "
                               << layer.rounded_error / layer.nearest_error << " of round-to-nearest's");
            CHECK(moved > 0);  // not round-to-nearest again
            CHECK(layer.rounded_error <= layer.nearest_error);
            nearest += layer.nearest_error, rounded += layer.rounded_error;
        }
        CHECK(rounded < 0.8 * nearest);
    }
}

// Not on every model: on the Fashion-MNIST mobilenet GPTQ lowers the SQNR (26.8 -> 24.7 dB on
// x86_inductor, 32.2 -> 25.1 on xnnpack when this was written), although it fits every layer's
// output better, the first convolution's by 3x on held-out images too. Rounding that convolution
// alone costs 1.4 / 3.5 dB. GPTQ is one of the choices an accuracy target weighs, not a default.
//
// Nor on every configuration of these two: the trained weights follow the CPU's float arithmetic,
// and on one 2-core machine cnn / x86_inductor went 44.23 -> 43.08 dB while the other three rose.
// GPTQ's own promise, a lower layer output error, is checked per layer above; here it must raise
// the model's SQNR on at least three of the four configurations.
TEST_CASE("gptq raises the SQNR on held-out images" * doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    int raised = 0;
    for (const std::string kind : {"cnn", "mlp"}) {
        const trained_classifier& t = trained_fashion_mnist(kind);
        for (const std::string spec : {"x86_inductor", "xnnpack"}) {
            CAPTURE(kind);
            CAPTURE(spec);
            const quantization_report plain = quantize_with(t, spec),
                                      rounded = quantize_with(t, with_options(spec, "gptq"));
            MESSAGE(kind << " " << spec << ": SQNR " << plain.sqnr_db << " -> " << rounded.sqnr_db
                         << " dB with gptq, top-1 " << *plain.quantized_accuracy << " -> "
                         << *rounded.quantized_accuracy << ", quantize " << plain.quantize_seconds << " -> "
                         << rounded.quantize_seconds << " s");
            raised += rounded.sqnr_db > plain.sqnr_db ? 1 : 0;
            std::string notes;
            for (const adjustment& a : rounded.adjustments) notes += a.change + "\n";
            CHECK(notes.find("gptq: ") != std::string::npos);
            CHECK(notes.find("layer(s) rounded on 256 calibration samples (layer output error from rounding") !=
                  std::string::npos);
        }
    }
    CHECK(raised >= 3);
}

TEST_CASE("the report states the steps per target and what each did") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mobilenet");
    auto quantizer =
        runtime_quantizer::compose({{"features", *parse_backend_spec("xnnpack:per_tensor,cle,bias_correction")},
                                    {"fc", *parse_backend_spec("xnnpack:per_tensor")}});
    REQUIRE(quantizer.has_value());
    const quantization_report report =
        quantize(t.model, *quantizer, t.data, {.per_layer = false, .progress = false}).report;
    REQUIRE(report.targets.size() == 2);
    CHECK(report.targets[0].options == "per_tensor,cle,bias_correction");
    CHECK(report.targets[1].options == "per_tensor");
    std::string changes;
    for (const adjustment& a : report.adjustments) changes += a.module_path + ": " + a.change + "\n";
    MESSAGE(changes);
    CHECK(
        changes.find("features.0.0: cle: weight ranges equalized along features.0.0 -> features.1.depthwise -> "
                     "features.1.pointwise -> features.2.depthwise -> features.2.pointwise -> features.3.depthwise -> "
                     "features.3.pointwise") != std::string::npos);
    CHECK(changes.find("features: bias correction: 7 layer(s) corrected") != std::string::npos);
    CHECK(changes.find("fc:") == std::string::npos);  // its target has neither option
    const nlohmann::json json = to_json(report);
    CHECK(json["targets"][0]["options"] == "per_tensor,cle,bias_correction");
    const std::string table = format_table(report);
    CHECK(table.find("xnnpack:per_tensor,cle,bias_correction") != std::string::npos);
}

TEST_CASE("the caller's model is left as it was") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mobilenet");
    const auto before = tensors_of(t.model);
    const std::string graph_before = t.model.get_method("forward").graph()->toString();
    (void)quantize(t.model, whole_model("x86_inductor:cle,bias_correction"), t.data,
                   {.per_layer = true, .progress = false});
    (void)quantize(t.model, whole_model("xnnpack:per_tensor,cle,bias_correction"), t.data,
                   {.per_layer = false, .progress = false});
    (void)quantize(t.model, whole_model("x86_inductor:gptq,bias_correction"), t.data,
                   {.per_layer = false, .progress = false});
    const auto after = tensors_of(t.model);
    REQUIRE(after.size() == before.size());
    for (const auto& [name, tensor] : before) {
        CAPTURE(name);
        CHECK(at::equal(tensor, after.at(name)));
    }
    CHECK(t.model.get_method("forward").graph()->toString() == graph_before);
    CHECK_FALSE(t.model.hasattr("_versatil_output_sum"));
    CHECK_FALSE(t.model.hasattr("_versatil_inputs"));
}

TEST_CASE("linear -> relu -> linear chains equalize too, for static, dynamic and QAT targets") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("mlp");
    const layer_graph graph = find_layer_graph(t.model);
    REQUIRE(graph.links.size() == 3);  // layers.0 -> layers.2 -> layers.4 -> head
    const at::Tensor images = t.data.evaluation[0].input(0);
    ::torch::jit::Module model = t.model;
    const at::Tensor reference = model.forward({images}).toTensor();
    for (const std::string spec :
         {"xnnpack:per_tensor,cle", "xnnpack:dynamic,per_tensor,cle", "x86_inductor:qat,cle"}) {
        CAPTURE(spec);
        prepared_model prepared = prepare(t.model, whole_model(spec));
        const prepared_model plain = prepare(t.model, whole_model(spec.substr(0, spec.size() - 4)));  // without ",cle"
        // Observers pass values through: the prepared model is the equalized float model.
        const ::torch::NoGradGuard no_grad;
        const at::Tensor output = prepared.module.forward({images}).toTensor();
        CHECK(((output - reference).abs().max() / reference.abs().max()).item<double>() < 1e-5);
        CHECK_FALSE(at::equal(find_submodule(prepared.module, "layers.2").attr("weight").toTensor(),
                              find_submodule(plain.module, "layers.2").attr("weight").toTensor()));
        CHECK(prepared.adjustments.front().change.starts_with(
            "cle: weight ranges equalized along layers.0 -> layers.2 -> "
            "layers.4 -> head"));
    }
    for (const std::string spec : {"xnnpack:dynamic,per_tensor", "xnnpack:dynamic,per_tensor,cle"})
        MESSAGE(spec << ": SQNR " << quantize_with(t, spec).sqnr_db << " dB");
    // Dynamic targets skip prepare where the direct path covers the model (dynamic.hpp): it
    // equalizes too, and says so.
    const std::optional<lowered_model> direct =
        lower_dynamic_directly(t.model, plan_for(whole_model("xnnpack:dynamic,per_tensor,cle")));
    REQUIRE(direct.has_value());
    REQUIRE(!direct->adjustments.empty());
    CHECK(direct->adjustments.front().change.starts_with("cle: weight ranges equalized along layers.0 -> layers.2"));
}

TEST_CASE("links pass through relu and pooling, not through flatten, and keep the float outputs") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("cnn");
    ::torch::jit::Module model = folded(t.model);
    std::string links;
    for (const layer_link& link : find_layer_graph(model).links)
        links +=
            link.producer + "->" + link.consumer + (link.activation == activation_kind::relu ? " (relu)" : "") + "; ";
    // features.0 -> relu -> max_pool -> features.4; features.4's output is flattened into fc1.
    CHECK(links == "features.0->features.4 (relu); classifier.fc1->classifier.fc2 (relu); ");
    const at::Tensor images = t.data.evaluation[0].input(0);
    const at::Tensor before = model.forward({images}).toTensor();
    const auto chains =
        equalize_links(model, find_layer_graph(model).links, [](const auto&, const auto&) { return true; });
    CHECK(chains.size() == 2);
    const at::Tensor after = model.forward({images}).toTensor();
    CHECK(((after - before).abs().max() / before.abs().max()).item<double>() < 1e-5);
    for (const std::string spec : {"xnnpack:per_tensor", "xnnpack:per_tensor,cle"})
        MESSAGE("cnn " << spec << ": SQNR " << quantize_with(t, spec).sqnr_db << " dB");
}

TEST_CASE("a model scripted in Python: nn.Conv2d and nn.ReLU equalize, nn.ReLU6 is left alone") {
    versatil::testing::require_python_torch();
    const versatil::testing::scratch_directory directory("versatil-cle-");
    const std::string script = (directory.path / "make.py").string(), file = (directory.path / "model.pt").string();
    std::ofstream(script) << R"PY(import sys
import torch
from torch import nn
torch.manual_seed(0)
def block(cin, cout, act):
    return nn.Sequential(nn.Conv2d(cin, cin, 3, padding=1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                         act(inplace=True), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout),
                         act(inplace=True))
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), block(8, 16, nn.ReLU), block(16, 16, nn.ReLU6),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.uniform_(-0.5, 0.5); m.running_var.uniform_(0.5, 2.0)
        m.weight.data.uniform_(0.2, 3.0); m.bias.data.uniform_(-0.5, 0.5)
torch.jit.script(model.eval()).save(sys.argv[1])
)PY";
    REQUIRE(std::system((std::string(versatil::testing::torch_python) + " " + script + " " + file).c_str()) == 0);
    ::torch::jit::Module model = ::torch::jit::load(file);
    const layer_graph graph = find_layer_graph(folded(model));
    std::string links;
    for (const layer_link& link : graph.links)
        links += link.producer + "->" + link.consumer +
                 (link.activation == activation_kind::clipping ? " (clips)" : "") + "; ";
    // Block 2 runs ReLU (a link into block 3), block 3 ReLU6 (no link through it).
    CHECK(links == "0->2.0; 2.0->2.3; 2.3->3.0; 3.0->3.3 (clips); ");

    const runtime_quantizer quantizer = whole_model("xnnpack:per_tensor,cle");
    prepared_model prepared = prepare(model, quantizer);
    std::string changes;
    for (const adjustment& a : prepared.adjustments) changes += a.module_path + ": " + a.change + "\n";
    CHECK(changes.find("0: cle: weight ranges equalized along 0 -> 2.0 -> 2.3 -> 3.0 (") != std::string::npos);
    CHECK(changes.find("3.0: cle: not equalized with 3.3: relu6") != std::string::npos);
    const at::Tensor images = at::randn({8, 3, 16, 16});
    const ::torch::NoGradGuard no_grad;
    const at::Tensor reference = model.forward({images}).toTensor();
    const at::Tensor output = prepared.module.forward({images}).toTensor();
    CHECK(((output - reference).abs().max() / reference.abs().max()).item<double>() < 1e-5);
}

TEST_CASE("an accuracy target keeps layers in float, the greatest gain first, until its threshold holds" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("cnn");
    const runtime_quantizer quantizer = whole_model("xnnpack:per_tensor");
    const quantization_result full = quantize(t.model, quantizer, t.data, {.progress = false});
    REQUIRE(full.report.per_layer.size() >= 2);
    const std::string worst = full.report.per_layer.front().name;
    const quantization_result worst_in_float = quantize(t.model, libtorch::detail::keeping_in_float(quantizer, {worst}),
                                                        t.data, {.per_layer = false, .progress = false});
    MESSAGE("all quantized " << full.report.sqnr_db << " dB; " << worst << " in float " << worst_in_float.report.sqnr_db
                             << " dB");
    REQUIRE(worst_in_float.report.sqnr_db > full.report.sqnr_db);

    // Between the two: exactly the worst layer kept in float (on this CNN the costliest alone is
    // also the one whose keeping in float gains most, the greedy step's choice).
    const double threshold = (full.report.sqnr_db + worst_in_float.report.sqnr_db) / 2;
    const quantization_result reached =
        quantize_to_target(t.model, quantizer, t.data, {.min_sqnr_db = threshold}, {.progress = false});
    const std::vector<accuracy_target_step>& steps = reached.report.target_steps;
    REQUIRE(steps.size() == 2);
    CHECK(steps[0].kept_in_float.empty());
    CHECK_FALSE(steps[0].met);
    CHECK(steps[0].sqnr_db == full.report.sqnr_db);
    CHECK(steps[1].kept_in_float == std::vector<std::string>{worst});
    CHECK(steps[1].met);
    CHECK(reached.report.sqnr_db >= threshold);
    CHECK(reached.report.sqnr_db == worst_in_float.report.sqnr_db);
    CHECK(reached.report.quantized_ops < full.report.quantized_ops);  // the layer really runs in float
    CHECK(reached.report.per_layer.size() == full.report.per_layer.size());  // the ranking it followed
    CHECK(to_json(reached.report)["kept_in_float"] == nlohmann::json::array({worst}));
    CHECK(format_table(reached.report).find("accuracy target (SQNR >= ") != std::string::npos);

    // Already met: nothing kept in float.
    const quantization_result at_once =
        quantize_to_target(t.model, quantizer, t.data, {.min_sqnr_db = full.report.sqnr_db - 1.0}, {.progress = false});
    REQUIRE(at_once.report.target_steps.size() == 1);
    CHECK(at_once.report.target_steps[0].met);
    CHECK(at_once.report.sqnr_db == full.report.sqnr_db);

    // Top-1: a drop of at most 100 points always holds; one of -100 never does.
    const quantization_result any_drop =
        quantize_to_target(t.model, quantizer, t.data, {.max_accuracy_drop = 100.0}, {.progress = false});
    CHECK(any_drop.report.target_steps.size() == 1);
    CHECK(any_drop.report.target_steps[0].quantized_accuracy == full.report.quantized_accuracy);
}

TEST_CASE("an accuracy target no step meets is an error naming it, and a top-1 target needs labels") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("cnn");
    const runtime_quantizer quantizer = whole_model("xnnpack:per_tensor");
    // The error paths need a search to its end, not figures: one batch each way is enough.
    const quantize_data few{{t.data.calibration.front()}, {t.data.evaluation.front()},
                            t.data.evaluation_labels->slice(0, 0, t.data.evaluation.front().input(0).size(0))};
    const auto failure_of = [&](const accuracy_target& target,
                                const quantize_data& data) -> std::pair<error_kind, std::string> {
        try {
            (void)quantize_to_target(t.model, quantizer, data, target, {.progress = false});
        } catch (const error& failure) {
            return {failure.kind(), failure.what()};
        }
        return {error_kind::invalid_argument, "no error"};
    };
    const auto [unmet_kind, unmet] = failure_of({.min_sqnr_db = 200.0}, few);
    CHECK(unmet_kind == error_kind::accuracy_target_unmet);
    CHECK(unmet.find("SQNR >= 200.00 dB is not met even with ") != std::string::npos);
    CHECK(unmet.find("analysed layers kept in float; the best step reached ") != std::string::npos);
    const auto [negative_kind, negative] = failure_of({.max_accuracy_drop = -100.0}, few);
    CHECK(negative_kind == error_kind::accuracy_target_unmet);
    const quantize_data unlabelled{few.calibration, few.evaluation, std::nullopt};
    const auto [unlabelled_kind, no_labels] = failure_of({.max_accuracy_drop = 1.0}, unlabelled);
    CHECK(unlabelled_kind == error_kind::no_evaluation_data);
    CHECK(no_labels.find("labelled held-out data") != std::string::npos);
}

// The greedy search's switched model (sensitivity.hpp): keeping layers in float switches off the
// values only they quantize, and stands for the quantized model except where a kept layer's
// output is read through ops by a quantized layer (then observed at that layer's input).
TEST_CASE("keeping layers in float in the switched model: shared values stay quantized, and where it stands") {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("cnn");
    const runtime_quantizer quantizer = whole_model("xnnpack:per_tensor");
    const converted_model converted = calibrated_and_converted(t.model, "xnnpack:per_tensor", t.data.calibration);
    switchable_quantization switched(converted.module, {"features.0", "features.4", "classifier.fc1", "classifier.fc2"},
                                     ::torch::jit::QuantType::STATIC);
    const auto off = [&](const std::vector<std::string>& kept) {
        switched.keep_in_float(kept);
        int count = 0;
        for (const auto& attribute : switched.module().named_attributes(/*recurse=*/false))
            count += attribute.name.starts_with("_quantize_") && !attribute.value.toBool() ? 1 : 0;
        return count;
    };
    CHECK(off({}) == 0);
    CHECK(off({"classifier.fc1"}) == 1);  // its weight; its input and output are fc2's and features.4's too
    CHECK(off({"classifier.fc2"}) == 2);  // its weight and its output
    CHECK(off({"classifier.fc1", "classifier.fc2"}) == 4);  // and the value between them
    CHECK_THROWS_AS(switched.keep_in_float({"classifier"}), error);

    // features.0's output reaches features.4 through max pooling, features.4's reaches fc1 through
    // max pooling and flatten; fc1's reaches fc2 directly.
    CHECK(switched.stands_for_keeping({"classifier.fc2"}));
    CHECK(switched.stands_for_keeping({"classifier.fc1", "classifier.fc2"}));
    CHECK(switched.stands_for_keeping({"features.4", "classifier.fc1"}));
    CHECK_FALSE(switched.stands_for_keeping({"features.0"}));
    CHECK_FALSE(switched.stands_for_keeping({"features.0", "features.4"}));

    const engine_scope engine(engine_settings{converted.plan.engine, 1, std::nullopt});
    const model_outputs reference = run_batches(t.model, t.data.evaluation);
    const auto switched_sqnr = [&](const std::vector<std::string>& kept) {
        switched.keep_in_float(kept);
        return compare_outputs(reference, run_batches(switched.module(), t.data.evaluation)).overall.sqnr_db;
    };
    const auto lowered_sqnr = [&](const std::vector<std::string>& kept) {
        return quantize(t.model, libtorch::detail::keeping_in_float(quantizer, kept), t.data,
                        {.per_layer = false, .progress = false})
            .report.sqnr_db;
    };
    for (const std::vector<std::string>& kept :
         std::vector<std::vector<std::string>>{{"classifier.fc2"}, {"features.0", "classifier.fc2"}}) {
        const double here = switched_sqnr(kept), lowered = lowered_sqnr(kept);
        MESSAGE("kept in float: " << kept.front() << (kept.size() > 1 ? " + " + kept.back() : "") << ": switched "
                                  << here << " dB, lowered " << lowered << " dB");
        // Where the switched model cannot stand for keeping, its figure may be far off or not,
        // as the trained weights go: 46.25 lowered against 42.49 switched when written (the
        // model trained with the reference BLAS), 46.36 against 46.35 with OpenBLAS. So the
        // analysis quantizes such layers alone rather than reading the switched model.
        if (switched.stands_for_keeping(kept)) CHECK(std::abs(here - lowered) < 0.1);
    }
}

// The issue's yardstick: no more layers in float than a greedy search keeps, which tries every
// remaining layer at each step and keeps the one that raises the SQNR most (one quantization per
// candidate, so quadratic in the layers). Checked at every threshold between the SQNRs the
// greedy search passes through with at most `max_kept` layers in float.
void require_no_more_kept_than_greedy(const torch::jit::Module& model, const runtime_quantizer& quantizer,
                                      const quantize_data& data, std::size_t max_kept) {
    const quantize_options quiet{.per_layer = false, .progress = false};
    // A choice the engine cannot run (QNNPACK, a dynamic q_proj kept beside quantized k_proj
    // and v_proj) is none, for the search as for quantize_to_target.
    const auto sqnr_keeping = [&](const std::vector<std::string>& kept) {
        try {
            return quantize(model, libtorch::detail::keeping_in_float(quantizer, kept), data, quiet).report.sqnr_db;
        } catch (const libtorch::error& failure) {
            if (failure.kind() != error_kind::lowering_failed) throw;
            return -std::numeric_limits<double>::infinity();
        }
    };
    const std::vector<layer_sqnr> ranking = quantize(model, quantizer, data, {.progress = false}).report.per_layer;
    std::vector<std::string> remaining;
    for (const layer_sqnr& layer : ranking) remaining.push_back(layer.name);
    std::vector<std::string> greedy;
    std::vector<double> greedy_sqnr{sqnr_keeping({})};
    while (remaining.size() > 1 && greedy.size() < max_kept) {
        double best = -std::numeric_limits<double>::infinity();
        std::size_t chosen = 0;
        for (std::size_t i = 0; i < remaining.size(); ++i) {
            std::vector<std::string> trial = greedy;
            trial.push_back(remaining[i]);
            if (const double sqnr = sqnr_keeping(trial); sqnr > best) best = sqnr, chosen = i;
        }
        greedy.push_back(remaining[chosen]);
        remaining.erase(remaining.begin() + static_cast<std::ptrdiff_t>(chosen));
        greedy_sqnr.push_back(best);
    }
    std::string order = std::to_string(greedy_sqnr.front()) + " dB";
    for (std::size_t k = 0; k < greedy.size(); ++k)
        order += ", +" + greedy[k] + " " + std::to_string(greedy_sqnr[k + 1]) + " dB";
    MESSAGE("greedy search: " << order);
    std::string ranked;
    for (const layer_sqnr& layer : ranking) ranked += (ranked.empty() ? "" : ", ") + layer.name;
    MESSAGE("per-layer ranking: " << ranked);
    for (std::size_t k = 1; k < greedy_sqnr.size(); ++k) {
        // The SQNR greedy reaches with k layers in float (and not before), less a hair.
        const double threshold = greedy_sqnr[k] - 1e-6;
        if (*std::max_element(greedy_sqnr.begin(), greedy_sqnr.begin() + static_cast<std::ptrdiff_t>(k)) >= threshold)
            continue;
        const auto start = std::chrono::steady_clock::now();
        const quantization_result reached =
            quantize_to_target(model, quantizer, data, {.min_sqnr_db = threshold}, {.progress = false});
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::size_t kept = reached.report.target_steps.back().kept_in_float.size();
        MESSAGE("SQNR >= " << threshold << " dB: greedy keeps " << k << " in float, the target " << kept << " ("
                           << reached.report.sqnr_db << " dB, quantize_to_target " << seconds << " s)");
        CHECK(kept <= k);
        CHECK(reached.report.sqnr_db >= threshold);
    }
}

// Following the per-layer ranking (each layer's cost quantized alone) missed it on this CNN:
// 3 layers at 46.25 dB where the greedy search keeps 2.
TEST_CASE("an accuracy target keeps no more layers in float than a greedy one-layer-at-a-time search" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    const trained_classifier& t = trained_fashion_mnist("cnn");
    require_no_more_kept_than_greedy(t.model, whole_model("xnnpack:per_tensor"), t.data, 4);
}

// Dynamic targets: the transformer encoder's 14 linear layers (its attention's q, k, v and out
// projections and its feed-forward pairs), rated on the direct path's switched model. The first
// steps are where the ranking and the greedy search part ways, if anywhere (here they do not).
// x86_inductor only: under xnnpack:dynamic a q, k or v projection kept in float beside quantized
// siblings takes graph mode, whose model QNNPACK cannot run (an int8 input given uint8's zero
// point); the brute-force search here meets it in its own quantizations.
TEST_CASE("a dynamic target's accuracy target keeps no more layers in float than a greedy search" *
          doctest::test_suite("yardstick")) {
    versatil::testing::require_fashion_mnist();
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, 512);
    const dataset test = load_fashion_mnist(fashion_mnist_split::test, 256);
    const torch::jit::Module model = transformer_encoder(3);
    require_no_more_kept_than_greedy(model, whole_model("x86_inductor:dynamic"),
                                     versatil::testing::fashion_mnist_data(train, test), 3);
}

TEST_CASE("the dynamic switched model keeps layers in float as the direct path does, but beside a quantized sibling") {
    versatil::testing::require_fashion_mnist();
    const dataset train = load_fashion_mnist(fashion_mnist_split::train, 64);
    const dataset test = load_fashion_mnist(fashion_mnist_split::test, 256);
    const quantize_data data = versatil::testing::fashion_mnist_data(train, test);
    const torch::jit::Module model = transformer_encoder(3);
    const runtime_quantizer quantizer = whole_model("x86_inductor:dynamic");
    const std::vector<std::string> layers{"embed", "head", "encoder.0.self_attn.q_proj", "encoder.0.self_attn.k_proj",
                                          "encoder.0.self_attn.v_proj", "encoder.0.linear1"};
    // Weights chosen on the calibration data, as quantize() chooses them (dynamic_weight_choice.hpp).
    std::optional<switchable_dynamic_quantization> switches =
        switchable_dynamic_quantization::make(model, plan_for(quantizer), layers, data.calibration);
    REQUIRE(switches.has_value());
    const model_outputs reference = run_batches(model, data.evaluation);
    const quantize_options quiet{.per_layer = false, .progress = false};
    for (const std::vector<std::string>& kept : std::vector<std::vector<std::string>>{
             {"head"},
             {"embed", "encoder.0.linear1"},
             {"encoder.0.self_attn.q_proj"},
             {"encoder.0.self_attn.q_proj", "encoder.0.self_attn.k_proj", "encoder.0.self_attn.v_proj"}}) {
        CAPTURE(kept.front());
        CAPTURE(kept.size());
        // q_proj alone in float reads the input k_proj and v_proj quantize: graph mode's case.
        const bool beside_quantized_sibling = kept.size() == 1 && kept.front() == "encoder.0.self_attn.q_proj";
        CHECK(switches->stands_for_keeping(kept) == !beside_quantized_sibling);
        if (beside_quantized_sibling) continue;
        switches->keep_in_float(kept);
        double switched = 0.0;
        {
            const engine_scope scope(engine_settings{switches->engine(), 1, std::nullopt});
            switched = compare_outputs(reference, run_batches(switches->module(), data.evaluation)).overall.sqnr_db;
        }
        const double lowered =
            quantize(model, libtorch::detail::keeping_in_float(quantizer, kept), data, quiet).report.sqnr_db;
        MESSAGE("kept " << kept.size() << " from " << kept.front() << ": switched " << switched << " dB, lowered "
                        << lowered << " dB");
        CHECK(std::abs(switched - lowered) < 1e-6);
    }
}
