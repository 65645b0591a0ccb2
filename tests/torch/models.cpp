// The model building blocks and whole models: shapes, module paths, determinism, batch-norm
// training behaviour, and, most important, that LibTorch's own passes and Python see them as
// torch.nn modules. FoldConvBatchNorm folds only modules with the torch.nn class names, so a fold
// that happens proves the names are right.
#include "doctest_with_torch.hpp"
#include <torch/csrc/jit/passes/fold_conv_bn.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "torch_test_helpers.hpp"
#include "versatil/libtorch/demo/models.hpp"
#include "versatil/libtorch/demo/modules.hpp"
#include "versatil/libtorch/torchscript/module_tree.hpp"


namespace vt = versatil::libtorch;
using ::torch::jit::Module;
using versatil::testing::run;

namespace {

at::Tensor sample_input(int64_t batch = 4) {
    return at::linspace(-2.0, 2.0, batch * 28 * 28).reshape({batch, 1, 28, 28});
}

// The forward graph with every submodule call inlined: what the model computes, as ops.
std::string inlined_graph(const Module& model) {
    auto graph = model.get_method("forward").graph()->copy();
    ::torch::jit::Inline(*graph);
    return graph->toString();
}

bool has_path(const std::vector<std::string>& paths, const std::string& path) {
    return std::find(paths.begin(), paths.end(), path) != paths.end();
}

std::string class_name(const Module& module) { return module.type()->name()->qualifiedName(); }

bool has_submodule_of_class(const Module& model, const std::string& qualified_name) {
    for (const auto& entry : model.named_modules())
        if (class_name(entry.value) == qualified_name) return true;
    return false;
}

struct model_case {
    std::string name;
    std::function<Module(uint64_t)> build;
    std::vector<std::string> expected_paths;
};

std::vector<model_case> all_models() {
    return {
        {"small_cnn_mlp", vt::small_cnn_mlp,
         {"features", "features.0", "features.1", "features.2", "features.3", "features.7", "classifier",
          "classifier.flatten", "classifier.fc1", "classifier.relu", "classifier.fc2"}},
        {"mlp", [](uint64_t seed) { return vt::mlp(seed); },
         {"flatten", "layers", "layers.0", "layers.1", "layers.4", "layers.5", "head"}},
        {"resnet_cnn", [](uint64_t seed) { return vt::resnet_cnn(seed); },
         {"stem.0", "stem.1", "stem.2", "layer1.0.conv1", "layer1.1.add_relu", "layer2.0.downsample.0",
          "layer2.0.downsample.1", "layer2.1.bn2", "pool", "flatten", "fc"}},
        {"mobilenet_cnn", vt::mobilenet_cnn,
         {"features.0.0", "features.1.depthwise", "features.1.pointwise", "features.3.relu2", "pool", "fc"}},
        {"transformer_encoder", [](uint64_t seed) { return vt::transformer_encoder(seed); },
         {"embed", "encoder.0.self_attn.q_proj", "encoder.0.self_attn.k_proj", "encoder.0.self_attn.v_proj",
          "encoder.1.self_attn.out_proj", "encoder.1.norm1", "encoder.1.linear1", "encoder.1.linear2",
          "encoder.1.norm2", "head"}},
    };
}

}  // namespace

TEST_CASE("every model maps [N,1,28,28] to [N,10] logits, in eval mode, with its documented paths") {
    for (const auto& model_case : all_models()) {
        CAPTURE(model_case.name);
        const Module model = model_case.build(7);
        CHECK_FALSE(model.is_training());
        const auto output = run(model, sample_input(3));
        CHECK(output.sizes() == at::IntArrayRef({3, vt::fashion_mnist_classes}));
        CHECK(output.isfinite().all().item<bool>());
        const auto paths = vt::module_paths(model);
        for (const auto& path : model_case.expected_paths) {
            CAPTURE(path);
            CHECK(has_path(paths, path));
        }
        CHECK_FALSE(has_path(paths, ""));
    }
}

TEST_CASE("models are deterministic for a seed and differ between seeds") {
    const auto input = sample_input();
    for (const auto& model_case : all_models()) {
        CAPTURE(model_case.name);
        const auto first = run(model_case.build(11), input);
        CHECK(at::equal(first, run(model_case.build(11), input)));
        CHECK_FALSE(at::allclose(first, run(model_case.build(12), input)));
    }
}

TEST_CASE("blocks have the torch.nn class names and share one class per signature") {
    const Module model = vt::small_cnn_mlp(1);
    CHECK(class_name(model.attr("features").toModule()) == vt::torch_nn_class::sequential);
    const Module features = model.attr("features").toModule();
    CHECK(class_name(features.attr("0").toModule()) == vt::torch_nn_class::conv2d);
    CHECK(class_name(features.attr("1").toModule()) == vt::torch_nn_class::batch_norm2d);
    CHECK(class_name(features.attr("2").toModule()) == vt::torch_nn_class::relu);
    CHECK(class_name(features.attr("3").toModule()) == vt::torch_nn_class::max_pool2d);
    const Module classifier = model.attr("classifier").toModule();
    CHECK(class_name(classifier.attr("fc1").toModule()) == vt::torch_nn_class::linear);
    CHECK(class_name(classifier.attr("flatten").toModule()) == vt::torch_nn_class::flatten);

    // Same signature: one class; another stride, another class.
    CHECK(vt::conv2d(3, 8, 3, 1).type() == vt::conv2d(4, 2, 5, 2).type());
    CHECK(vt::conv2d(3, 8, 3, 1).type() != vt::conv2d(3, 8, 3, 1, {.stride = 2}).type());
    CHECK(vt::relu().type() == features.attr("2").toModule().type());
    CHECK(vt::batch_norm2d(3).type() == vt::batch_norm2d(5).type());
    // Parameters are what an nn module has: weight and bias, requiring grad.
    const Module bn = vt::batch_norm2d(3);
    std::vector<std::string> names;
    for (const auto& parameter : bn.named_parameters()) {
        names.push_back(parameter.name);
        CHECK(parameter.value.requires_grad());
    }
    CHECK((names == std::vector<std::string>{"weight", "bias"}));
    std::vector<std::string> buffers;
    for (const auto& buffer : bn.named_buffers()) buffers.push_back(buffer.name);
    CHECK((buffers == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
}

TEST_CASE("conv2d and linear compute what ATen computes with their parameters, initialised like PyTorch") {
    Module conv = vt::conv2d(4, 6, 3, 5, {.stride = 2, .padding = 1, .groups = 2});
    const auto weight = conv.attr("weight").toTensor();
    const auto bias = conv.attr("bias").toTensor();
    CHECK(weight.sizes() == at::IntArrayRef({6, 2, 3, 3}));
    const double bound = 1.0 / std::sqrt(2.0 * 3 * 3);
    CHECK(weight.abs().max().item<double>() <= bound);
    CHECK(bias.abs().max().item<double>() <= bound);
    const auto input = at::randn({2, 4, 9, 9});
    const ::torch::NoGradGuard no_grad;
    CHECK(at::allclose(conv.forward({input}).toTensor(), at::conv2d(input, weight, bias, {2, 2}, {1, 1}, {1, 1}, 2)));

    Module unbiased = vt::conv2d(4, 6, 1, 5, {.bias = false});
    CHECK(unbiased.attr("bias").isNone());
    CHECK(unbiased.parameters().size() == 1);
    CHECK(at::allclose(unbiased.forward({input}).toTensor(), at::conv2d(input, unbiased.attr("weight").toTensor())));

    Module fc = vt::linear(400, 30, 9);
    const auto fc_weight = fc.attr("weight").toTensor();
    // U(-b, b) has standard deviation b / sqrt(3); 12000 draws pin it to about 1 %.
    CHECK(fc_weight.std().item<double>() == doctest::Approx(1.0 / std::sqrt(400.0) / std::sqrt(3.0)).epsilon(0.03));
    const auto x = at::randn({5, 400});
    CHECK(at::allclose(fc.forward({x}).toTensor(), at::linear(x, fc_weight, fc.attr("bias").toTensor())));
}

TEST_CASE("batch_norm2d updates its running statistics in training mode only") {
    Module bn = vt::batch_norm2d(3);
    const auto input = at::randn({8, 3, 5, 5}) * 2.0 + 1.5;
    bn.train();
    const ::torch::NoGradGuard no_grad;
    const auto trained_output = bn.forward({input}).toTensor();
    // Training mode normalises with the batch statistics.
    const auto mean = input.mean({0, 2, 3}, true);
    const auto var = input.var({0, 2, 3}, false, true);
    CHECK(at::allclose(trained_output, (input - mean) / at::sqrt(var + 1e-5), 1e-4, 1e-4));
    const auto running_mean = bn.attr("running_mean").toTensor().clone();
    const auto running_var = bn.attr("running_var").toTensor().clone();
    CHECK(at::allclose(running_mean, 0.1 * mean.flatten()));
    CHECK(at::allclose(running_var, 0.9 + 0.1 * input.var({0, 2, 3}, true, false)));
    CHECK(bn.attr("num_batches_tracked").toTensor().item<int64_t>() == 1);

    bn.eval();
    const auto eval_output = bn.forward({input}).toTensor();
    CHECK(at::equal(bn.attr("running_mean").toTensor(), running_mean));
    CHECK(at::equal(bn.attr("running_var").toTensor(), running_var));
    CHECK(bn.attr("num_batches_tracked").toTensor().item<int64_t>() == 1);
    CHECK(at::allclose(eval_output, (input - running_mean.view({1, 3, 1, 1})) /
                                        at::sqrt(running_var.view({1, 3, 1, 1}) + 1e-5),
                       1e-4, 1e-4));
}

TEST_CASE("LibTorch's FoldConvBatchNorm folds every conv+bn pair, so the class names are the torch.nn ones") {
    for (const auto& model_case : all_models()) {
        CAPTURE(model_case.name);
        Module model = model_case.build(3);
        if (!has_submodule_of_class(model, vt::torch_nn_class::batch_norm2d)) continue;
        // Give batch norm non-trivial statistics, or a fold that did nothing would still match.
        int64_t index = 0;
        for (const auto& entry : model.named_modules()) {
            if (class_name(entry.value) != vt::torch_nn_class::batch_norm2d) continue;
            const ::torch::NoGradGuard no_grad;
            auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(100 + index++));
            for (const char* name : {"weight", "bias", "running_mean"})
                entry.value.attr(name).toTensor().copy_(
                    at::randn(entry.value.attr(name).toTensor().sizes(), generator) * 0.5);
            entry.value.attr("running_var").toTensor().uniform_(0.5, 2.0, generator);
        }
        REQUIRE(inlined_graph(model).find("aten::batch_norm") != std::string::npos);
        const Module folded = ::torch::jit::FoldConvBatchNorm(model);
        const auto graph = inlined_graph(folded);
        CHECK(graph.find("aten::batch_norm") == std::string::npos);
        const auto input = sample_input();
        const auto expected = run(model, input);
        const auto actual = run(folded, input);
        CHECK((expected - actual).abs().max().item<double>() < 1e-4);
    }
}

TEST_CASE("a saved model loads back with identical outputs") {
    const versatil::testing::scratch_directory directory("versatil-models-");
    const auto input = sample_input();
    for (const auto& model_case : all_models()) {
        CAPTURE(model_case.name);
        const Module model = model_case.build(21);
        const auto file = (directory.path / (model_case.name + ".pt")).string();
        model.save(file);
        const Module loaded = ::torch::jit::load(file);
        CHECK(at::equal(run(model, input), run(loaded, input)));
        CHECK(vt::module_paths(loaded) == vt::module_paths(model));
    }
}

TEST_CASE("Python's torch.jit.load sees the saved model as torch.nn modules with the same outputs") {
    versatil::testing::require_python_torch();
    const std::string python = versatil::testing::torch_python;
    const versatil::testing::scratch_directory directory("versatil-models-");
    const Module model = vt::small_cnn_mlp(5);
    const auto model_file = (directory.path / "small_cnn_mlp.pt").string();
    const auto script_file = (directory.path / "check.py").string();
    const auto output_file = (directory.path / "output.txt").string();
    model.save(model_file);
    std::ofstream(script_file) << R"PY(import sys
import torch
m = torch.jit.load(sys.argv[1])
features = m.features
folded = torch.jit._recursive.wrap_cpp_module(torch._C._jit_pass_fold_convbn(m._c))
print(getattr(features, "0").original_name, getattr(features, "1").original_name,
      m.classifier.fc1.original_name, m.training,
      "aten::batch_norm" in str(m.inlined_graph), "aten::batch_norm" in str(folded.inlined_graph))
x = torch.linspace(-2.0, 2.0, 4 * 28 * 28).reshape(4, 1, 28, 28)
with torch.no_grad():
    print(" ".join("%.9e" % v for v in m(x).flatten().tolist()))
)PY";
    const std::string command = python + " " + script_file + " " + model_file + " > " + output_file + " 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream output(output_file);
    std::string names;
    std::getline(output, names);
    CAPTURE(names);
    REQUIRE(status == 0);
    // Python names the classes as torch.nn ones and its own conv+bn fold removes batch_norm.
    CHECK(names == "Conv2d BatchNorm2d Linear False True False");
    std::string values_line;
    std::getline(output, values_line);
    std::istringstream values(values_line);
    const auto expected = run(model, sample_input()).flatten();
    int64_t count = 0;
    double max_difference = 0.0;
    for (double value = 0.0; values >> value; ++count)
        if (count < expected.numel())
            max_difference = std::max(max_difference, std::abs(value - expected[count].item<double>()));
    CHECK(count == expected.numel());
    CHECK(max_difference < 1e-5);
}

TEST_CASE("bad block arguments are rejected with invalid_argument") {
    const auto kind_of = [](const std::function<void()>& build) {
        try {
            build();
        } catch (const vt::error& failure) {
            return failure.kind();
        }
        FAIL("no error");
        return vt::error_kind::io_error;
    };
    CHECK(kind_of([] { vt::conv2d(3, 8, 3, 0, {.groups = 2}); }) == vt::error_kind::invalid_argument);
    CHECK(kind_of([] { vt::linear(0, 8, 0); }) == vt::error_kind::invalid_argument);
    CHECK(kind_of([] { vt::self_attention(10, 3, 0); }) == vt::error_kind::invalid_argument);
    CHECK(kind_of([] { vt::mlp(0, 16, 0); }) == vt::error_kind::invalid_argument);
    CHECK(kind_of([] { vt::sequential({}); }) == vt::error_kind::invalid_argument);
}
