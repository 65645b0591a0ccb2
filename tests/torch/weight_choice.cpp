// Dynamic layers' weight scheme and reduce_range chosen by measurement with the engine
// (accuracy/dynamic_weight_choice.hpp), on a layer where the right answer is known by hand.

#include "doctest_with_torch.hpp"
#include "torch_test_helpers.hpp"

#include <string>

#include "versatil/libtorch.hpp"

using namespace versatil;
using namespace versatil::libtorch;

namespace {

using versatil::testing::whole_model;

// One linear layer `fc` (16 -> 2) whose answer is known by hand. Row 0 holds the integers
// 7, 15, ..., 127, row 1 the integers 100, 94, ..., 10: per tensor, xnnpack's symmetric grid
// [-127, 127] has scale 127 / 127 = 1 and holds every weight exactly; per channel, row 1's
// scale is 100 / 127 and its integers fall between grid points. All positive, so that errors of
// one sign in the inputs add up at the output rather than cancel.
::torch::jit::Module hand_made_layer() {
    ::torch::jit::Module fc = linear(16, 2, 1);
    const ::torch::NoGradGuard no_grad;
    const at::Tensor steps = at::arange(16, at::kFloat);
    fc.attr("weight").toTensor().copy_(at::stack({steps * 8.0 + 7.0, 100.0 - steps * 6.0}));
    fc.attr("bias").toTensor().copy_(at::tensor({0.5F, -0.25F}));
    ::torch::jit::Module model("__torch__.versatil.tests.HandMadeLayer");
    model.register_module("fc", fc);
    model.define(R"(
def forward(self, x):
    return self.fc.forward(x)
)");
    model.eval();
    return model;
}

// Inputs on the uint8 grid of step 0.01 over [0, 2.55]: column 0 is 2.55 in every row (the range
// the engine computes at run time), the others odd multiples of 0.01 below 0.1. Eight bits hold
// them exactly; seven (reduce_range: step 2.55 / 127 = 0.02008) round each of them down by about
// 0.01 ((2m + 1) x 0.01 / 0.02008 = m + 0.498 - 0.004 m), a fifth to all of its value, and with
// positive weights those errors add up over 15 columns (about 0.01 x 15 x 64 = 10 at row 0's
// output), where weight rounding (at most half a step of 1, on values of order 0.05, and 2.55
// in column 0) costs about 1.
std::vector<batch> hand_made_inputs(std::uint64_t seed) {
    const at::Generator generator = at::detail::createCPUGenerator(seed);
    at::Tensor x = (at::randint(0, 5, {32, 16}, generator) * 2 + 1).to(at::kFloat) * 0.01;
    x.select(1, 0).fill_(2.55);
    return {batch({x.slice(0, 0, 16)}), batch({x.slice(0, 16, 32)})};
}

std::string change_of(const std::vector<adjustment>& adjustments, const std::string& path) {
    for (const adjustment& a : adjustments)
        if (a.module_path == path && a.change.find("reduce_range") != std::string::npos) return a.change;
    return "";
}

}  // namespace

TEST_CASE("xnnpack's dynamic layer takes per-tensor weights where they are exact and per-channel ones are not") {
    const ::torch::jit::Module model = hand_made_layer();
    const std::vector<batch> calibration = hand_made_inputs(1), evaluation = hand_made_inputs(2);
    const quantization_plan plan = plan_for(whole_model("xnnpack:dynamic"));
    const std::optional<lowered_model> chosen = lower_dynamic_directly(model, plan, {}, calibration);
    REQUIRE(chosen.has_value());
    const std::string change = change_of(chosen->adjustments, "fc");
    CAPTURE(change);
    CHECK(change.starts_with("per-tensor weights"));
    // Exact weights and an exact input leave only float rounding of the int32 sums' rescaling:
    // far above the ~50 dB per-channel weights give here.
    const model_outputs reference = run_batches(model, evaluation);
    const engine_scope engine(plan.engine);
    CHECK(compare_outputs(reference, run_batches(chosen->module, evaluation)).overall.sqnr_db > 100.0);
}

TEST_CASE("oneDNN's dynamic layer drops reduce_range where the input needs its eighth bit") {
    const ::torch::jit::Module model = hand_made_layer();
    const std::vector<batch> calibration = hand_made_inputs(1), evaluation = hand_made_inputs(2);
    const quantization_plan plan = plan_for(whole_model("x86_inductor:dynamic"));
    const std::optional<lowered_model> chosen = lower_dynamic_directly(model, plan, {}, calibration);
    REQUIRE(chosen.has_value());
    const std::string change = change_of(chosen->adjustments, "fc");
    CAPTURE(change);
    CHECK(change.find("reduce_range off:") != std::string::npos);
    // Without data to measure on, the layer is quantized as graph mode quantizes it.
    const std::optional<lowered_model> standard = lower_dynamic_directly(model, plan);
    REQUIRE(standard.has_value());
    CHECK(change_of(standard->adjustments, "fc").empty());
    const model_outputs reference = run_batches(model, evaluation);
    const engine_scope engine(plan.engine);
    CHECK(compare_outputs(reference, run_batches(chosen->module, evaluation)).overall.sqnr_db >
          compare_outputs(reference, run_batches(standard->module, evaluation)).overall.sqnr_db + 6.0);

    SUBCASE("the choice is measured on the leading dynamic_choice_samples of the data only") {
        static_assert(dynamic_choice_samples == 64, "the batches below are sized for 64 samples");
        // Six batches of 16: the first four are measured (64 samples); the last two (column 0 at
        // 1e4, an output 4000 times louder) would change every figure the reason gives if read.
        std::vector<batch> longer = calibration;
        for (const batch& more : hand_made_inputs(3)) longer.push_back(more);
        const at::Tensor loud = at::zeros({16, 16});
        loud.select(1, 0).fill_(1e4);
        longer.push_back(batch({loud}));
        longer.push_back(batch({loud}));
        const std::optional<lowered_model> bounded = lower_dynamic_directly(model, plan, {}, longer);
        REQUIRE(bounded.has_value());
        const std::optional<lowered_model> measured_alone =
            lower_dynamic_directly(model, plan, {}, std::vector<batch>(longer.begin(), longer.begin() + 4));
        REQUIRE(measured_alone.has_value());
        CHECK(change_of(bounded->adjustments, "fc") == change_of(measured_alone->adjustments, "fc"));
        CHECK(change_of(bounded->adjustments, "fc").find("on 64 calibration samples") != std::string::npos);
    }

    SUBCASE("the user's reduce_range option is kept") {
        const std::optional<lowered_model> asked =
            lower_dynamic_directly(model, plan_for(whole_model("x86_inductor:dynamic,reduce_range")), {}, calibration);
        REQUIRE(asked.has_value());
        CHECK(change_of(asked->adjustments, "fc").find("reduce_range on:") != std::string::npos);
        CHECK(change_of(asked->adjustments, "fc").find("reduce_range off") == std::string::npos);
    }
}
