// The code generator: validation names the op and the problem, lowering makes the integer
// decisions (biases, multipliers, folded clamps), run_on_host agrees with a plain executor
// that gives every tensor its own buffer, and header_for checks its namespace.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "synthetic_graph.hpp"
#include "versatil/codegen/figures.hpp"
#include "versatil/codegen/header_writer.hpp"
#include "versatil/codegen/host_runner.hpp"
#include "versatil/codegen/lower.hpp"
#include "versatil/codegen/validate.hpp"

namespace {

using namespace versatil::codegen;
namespace fw = versatil::firmware;

std::string rejection(const integer_graph& g) {
    try {
        validate(g);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

integer_op& op_named(integer_graph& g, const std::string& module) {
    for (integer_op& op : g.ops)
        if (op.module == module) return op;
    throw std::logic_error("no op " + module);
}

}  // namespace

TEST_CASE("validate accepts the synthetic graph and names the op of every malformation") {
    const integer_graph good = synthetic::graph(1);
    CHECK(rejection(good).empty());

    integer_graph g = good;
    op_named(g, "features.0").weights.pop_back();
    CHECK(rejection(g) == "versatil::codegen: op 0 'features.0' (conv2d): 71 weights, expected 72");

    g = good;
    op_named(g, "features.3.depthwise").groups = 3;
    CHECK(rejection(g).find("'features.3.depthwise' (conv2d): 3 groups do not divide 8 input and 8 output channels") !=
          std::string::npos);

    g = good;
    g.tensors[static_cast<std::size_t>(op_named(g, "features.4").output)].shape.height = 8;  // as ceil mode would
    CHECK(rejection(g).find("'features.4' (conv2d): output shape {16, 8, 7} does not follow from input {8, 14, 14}") !=
          std::string::npos);

    g = good;
    op_named(g, "features.3.add").inputs = {op_named(g, "features.4").output, 2};
    CHECK(rejection(g).find("'features.3.add' (add): input tensor") != std::string::npos);
    CHECK(rejection(g).find("is read before any op writes it") != std::string::npos);

    g = good;
    g.tensors[static_cast<std::size_t>(op_named(g, "features.2").output)].zero_point += 1;
    CHECK(rejection(g).find("'features.2' (max_pool2d): output quantization differs") != std::string::npos);

    g = good;
    op_named(g, "classifier.fc1").weight_scales[3] = 0.0;
    CHECK(rejection(g).find("'classifier.fc1' (linear): a weight scale is not positive") != std::string::npos);

    g = good;
    op_named(g, "features.6").window.dilation_h = 2;
    CHECK(rejection(g).find("'features.6' (avg_pool2d): average pooling has no dilation") != std::string::npos);

    g = good;
    op_named(g, "classifier.flatten").relu = true;
    CHECK(rejection(g).find("'classifier.flatten' (flatten): a fused relu") != std::string::npos);

    g = good;
    g.tensors[0].zero_point = 200;
    CHECK(rejection(g) == "versatil::codegen: tensor 0 has zero point 200, outside int8");

    g = good;
    g.ops.clear();
    g.output = g.input;
    CHECK(rejection(g) == "versatil::codegen: the graph has no op");

    g = good;
    g.output = 1000;
    CHECK(rejection(g) == "versatil::codegen: the graph's output tensor 1000 does not exist");

    // Every public entry point validates.
    g = good;
    op_named(g, "classifier.fc2").bias.push_back(0.0F);
    CHECK_THROWS_WITH_AS(header_for(g, "m"),
                         doctest::Contains("'classifier.fc2' (linear): 11 biases for 10 output channels"),
                         std::invalid_argument);
    CHECK_THROWS_AS(summarize(g), std::invalid_argument);
    CHECK_THROWS_AS(run_on_host(g, std::vector<std::int8_t>(784)), std::invalid_argument);
}

TEST_CASE("lowering: int32 biases at input scale x weight scale, per-channel multipliers, folded clamps") {
    const integer_graph g = synthetic::graph(1);
    const lowered_graph l = lower(g);
    // Two clamps fold (relu6 after the depthwise, relu after features.4); the hardtanh with its
    // own output quantization stays a layer.
    CHECK(l.layers.size() == g.ops.size() - 2);
    const lowered_layer& dw = l.layers[2];
    CHECK(dw.module == "features.3.depthwise");
    CHECK(dw.fused == std::vector<std::string>{"features.3.relu6"});
    const auto& dw_params = std::get<fw::conv2d_params>(dw.params);
    const integer_op& source = g.ops[2];
    const activation_tensor& in = g.tensors[static_cast<std::size_t>(source.inputs[0])];
    const activation_tensor& out = g.tensors[static_cast<std::size_t>(g.ops[3].output)];
    CHECK(dw_params.range.min == out.zero_point);  // relu6: 0 is the zero point
    CHECK(dw_params.range.max < 127);
    for (std::size_t c = 0; c < 8; ++c) {
        // As LibTorch 1.13 computes them before QNNPACK runs the conv: the bias as ATen's quantize_val
        // quantizes it (float product with 1 / float scale, half to even), the rescale in float
        // (generate_requantization_scales), which a Q31 multiplier holds exactly.
        const double accumulator_scale = in.scale * source.weight_scales[c];
        CHECK(dw.bias[c] == static_cast<std::int32_t>(
                                std::nearbyint(source.bias[c] * (1.0F / static_cast<float>(accumulator_scale)))));
        const float requantization = (static_cast<float>(source.weight_scales[c]) * static_cast<float>(in.scale)) *
                                     (1.0F / static_cast<float>(out.scale));
        CHECK(dw.multipliers[c] == versatil::math::quantize_multiplier(requantization));
        CHECK(std::ldexp(static_cast<double>(dw.multipliers[c].multiplier), dw.multipliers[c].shift - 31) ==
              requantization);
    }
    bool standing_clamp = false;
    for (const lowered_layer& layer : l.layers)
        standing_clamp = standing_clamp || layer.module == "features.5.hardtanh";
    CHECK(standing_clamp);
    // The relu fused by the model itself (conv2d_relu) keeps levels at or above the zero point.
    CHECK(std::get<fw::conv2d_params>(l.layers[0].params).range == fw::activation_range{-128, 127});  // zero point -128
    // QNNPACK's add: each input's scale / output scale at 2^shift, the larger ratio in [2^21, 2^22).
    const auto& add = std::get<fw::add_params>(l.layers[4].params);
    const integer_op& add_op =
        *std::find_if(g.ops.begin(), g.ops.end(), [](const integer_op& op) { return op.kind == op_kind::add; });
    const float ratio1 = static_cast<float>(g.tensors[static_cast<std::size_t>(add_op.inputs[0])].scale) /
                         static_cast<float>(g.tensors[static_cast<std::size_t>(add_op.output)].scale);
    CHECK(add.input1_multiplier ==
          static_cast<std::int32_t>(std::nearbyint(std::ldexp(static_cast<double>(ratio1), add.shift))));
    CHECK(std::max(add.input1_multiplier, add.input2_multiplier) >= (1 << 21));
    CHECK(std::max(add.input1_multiplier, add.input2_multiplier) < (1 << 22));
}

TEST_CASE("run_on_host equals a plain executor with a buffer per tensor, and reads only its input") {
    for (unsigned seed = 1; seed <= 5; ++seed) {
        const lowered_graph l = lower(synthetic::graph(seed));
        std::mt19937 random(seed);
        std::vector<std::int8_t> input(784);
        for (auto& x : input) x = static_cast<std::int8_t>(random() % 256);
        std::vector<std::vector<std::int8_t>> tensors;
        for (const fw::shape& s : l.tensors) tensors.emplace_back(s.bytes());
        tensors[static_cast<std::size_t>(l.input)] = input;
        for (const lowered_layer& layer : l.layers) {
            const layer_params params = bound(layer);
            const auto& a = tensors[static_cast<std::size_t>(layer.inputs[0])];
            auto& out = tensors[static_cast<std::size_t>(layer.output)];
            if (const auto* p = std::get_if<fw::conv2d_params>(&params)) {
                // The reference kernel, on the weights in the reference order (the exporter
                // stored conv2d_im2col's in that kernel's order).
                std::vector<std::int8_t> reference = layer.weights;
                if (layer.kernel == fw::conv2d_kernel::conv2d_im2col) {
                    const int length = fw::conv2d_patch_length(*p);
                    for (int oc = 0; oc < p->output.channels; ++oc)
                        for (int k = 0; k < length; ++k)
                            reference[static_cast<std::size_t>(oc * length + k)] =
                                layer.weights[static_cast<std::size_t>(fw::conv2d_im2col_weight_position(*p, oc, k))];
                }
                fw::conv2d_params q = *p;
                q.weights = reference.data();
                fw::conv2d(q, a.data(), out.data());
            }
            else if (const auto* p = std::get_if<fw::linear_params>(&params)) fw::linear(*p, a.data(), out.data());
            else if (const auto* p = std::get_if<fw::add_params>(&params))
                fw::add(*p, a.data(), tensors[static_cast<std::size_t>(layer.inputs[1])].data(), out.data());
            else if (const auto* p = std::get_if<fw::clamp_params>(&params)) fw::clamp(*p, a.data(), out.data());
            else if (const auto* p = std::get_if<fw::max_pool2d_params>(&params))
                fw::max_pool2d(*p, a.data(), out.data());
            else if (const auto* p = std::get_if<fw::avg_pool2d_params>(&params))
                fw::avg_pool2d(*p, a.data(), out.data());
            else out = a;
        }
        const std::vector<std::int8_t> before = input;
        CHECK(run_on_host(l, input) == tensors[static_cast<std::size_t>(l.output)]);
        CHECK(input == before);
        const firmware_figures f = summarize(l);
        CHECK(f.arena_bytes >= f.arena_lower_bound_bytes);
        CHECK(f.arena_bytes <= f.greedy_planner_bytes);
    }
}

TEST_CASE("quantize_input rounds as ATen does and checks the size") {
    integer_graph g = synthetic::graph(1);
    g.tensors[0].scale = 0.5;
    g.tensors[0].zero_point = 3;
    std::vector<float> values(784, 0.0F);
    values[0] = 0.25F;    // 0.5 -> 0 (half to even) + 3
    values[1] = 0.75F;    // 1.5 -> 2 + 3
    values[2] = -1000.F;  // clamps
    values[3] = 1.0F;
    const auto levels = quantize_input(g, values);
    CHECK(levels[0] == 3);
    CHECK(levels[1] == 5);
    CHECK(levels[2] == -128);
    CHECK(levels[3] == 5);
    CHECK(dequantize_output(g, std::vector<std::int8_t>{5}).size() == 1);
    CHECK_THROWS_AS(quantize_input(g, std::vector<float>(10)), std::invalid_argument);
}

TEST_CASE("header_for: a namespace must be a C++ name; the header holds the API and the plan") {
    const integer_graph g = synthetic::graph(2);
    for (const char* bad : {"", "2fast", "a-b", "namespace", "a::", "::a", "std", "__x", "a::int"}) {
        CHECK_THROWS_WITH_AS(header_for(g, bad), doctest::Contains("is not a C++ namespace name"),
                             std::invalid_argument);
        CHECK_THROWS_AS(versatil::codegen::check_namespace(bad), std::invalid_argument);  // the CLI's early check
    }
    CHECK_NOTHROW(versatil::codegen::check_namespace("vendor::fm"));
    const std::string text = header_for(g, "vendor::fm");
    for (const char* part :
         {"namespace vendor::fm {",
          "struct model {",
          "static constexpr std::size_t input_size = 784;",
          "static constexpr std::size_t output_size = 10;",
          "arena_bytes = detail::plan.figures.arena_bytes",
          "static void run(const std::int8_t* input, std::int8_t* output, std::byte* arena,\n"
          "                    OnLayer&& on_layer = {}) noexcept",
          "on_layer(fw::layer_event::starts, 0, \"features.0\");",
          "void vendor_fm_run(const int8_t* input, int8_t* output);",
          "#define VENDOR_FM_INPUT_SIZE 784\n",
          "#define VENDOR_FM_OUTPUT_SIZE 10\n",
          "#ifndef VERSATIL_WEIGHTS_SECTION\n",
          "VERSATIL_WEIGHTS_ALIGN VERSATIL_WEIGHTS_SECTION inline constexpr std::int8_t weights_0[]",
          "VERSATIL_ARENA_ALIGN VERSATIL_ARENA_SECTION inline std::byte arena[",
          "inline constexpr fw::arena_plan<tensor_count> plan = {{{",
          "static_assert(fw::misplaced_tensor(plan, tensors, layers, input_tensor, "
          "output_tensor) == -1",
          "static_assert(fw::consistent(layers[0], tensors, tensor_count), \"vendor::fm: layer 0 'features.0' (conv2d)",
          "fw::depthwise_conv2d_3x3(detail::layer_2, a + plan.tensors[",
          "fw::conv2d_im2col(detail::layer_0, ",
          "fw::linear_blocked(detail::layer_",
          "kernel conv2d_im2col, weights in its order",
          ", in place\n"})
        CHECK_MESSAGE(text.find(part) != std::string::npos, part);
}

TEST_CASE("lower with a channel-last input: the first convolution gathers it; other first layers are refused") {
    const integer_graph g = synthetic::graph(4, 3);  // a 3-channel 28x28 image
    const lowered_graph planar = lower(g), interleaved = lower(g, input_layout::hwc);
    CHECK(std::get<fw::conv2d_params>(interleaved.layers[0].params).input_channels_last);
    CHECK_FALSE(std::get<fw::conv2d_params>(interleaved.layers[2].params).input_channels_last);  // reads no input
    std::mt19937 random(5);
    for (int n = 0; n < 20; ++n) {
        std::vector<std::int8_t> image(3 * 28 * 28), transposed(image.size());
        for (auto& x : image) x = static_cast<std::int8_t>(random() % 256);
        for (std::size_t c = 0; c < 3; ++c)
            for (std::size_t i = 0; i < 28 * 28; ++i) transposed[i * 3 + c] = image[c * 28 * 28 + i];
        REQUIRE(run_on_host(interleaved, transposed) == run_on_host(planar, image));
    }

    synthetic::builder pooled(6);
    pooled.graph.input = pooled.tensor({3, 8, 8}, 0.02, 0);
    const int x = pooled.pool(op_kind::max_pool2d, "stem.pool", pooled.graph.input, {2, 2, 2, 2, 0, 0, 1, 1});
    pooled.graph.output = pooled.conv("stem.conv", x, 4, {1, 1, 1, 1, 0, 0, 1, 1}, 1, false);
    CHECK_NOTHROW(lower(pooled.graph));
    CHECK_THROWS_WITH_AS(lower(pooled.graph, input_layout::hwc),
                         doctest::Contains("is read by layer 'stem.pool' (max_pool2d), which is not a convolution"),
                         std::invalid_argument);

    // An input without a plane (a row of features) is the same bytes in either layout.
    synthetic::builder rows(7);
    rows.graph.input = rows.tensor({20, 1, 1}, 0.02, 0);
    rows.graph.output = rows.linear("fc", rows.graph.input, 4);
    CHECK_NOTHROW(lower(rows.graph, input_layout::hwc));
}
