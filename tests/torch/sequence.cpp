// One stage sequence (stages/sequence.hpp): every entry point that quantizes runs the same
// stages on the same data, so it builds and measures the same model. Each case here once failed
// when an entry point ran a copy of the sequence of its own.
#include "doctest_with_torch.hpp"

#include <boost/hana/concat.hpp>

#include "torch_test_helpers.hpp"
#include "versatil/libtorch.hpp"
#include "versatil/libtorch/demo/models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using versatil::testing::smooth_batches;
using versatil::testing::whole_model;

TEST_CASE("measure() analyses the layers of quantize_model's model, GPTQ-rounded as quantize() analyses them") {
    // The per-layer analysis of static targets switches layers in the converted model (sensitivity.hpp).
    // quantize() hands over its own; measure() builds one: before the one sequence it did so without the
    // gptq step, so its figures were those of round-to-nearest weights, not of the model it measured.
    const quantize_data data{smooth_batches(8, 32, 1), smooth_batches(4, 32, 2), std::nullopt};
    const runtime_quantizer quantizer = whole_model("x86_inductor:gptq");
    const quantize_options options{.progress = false};
    const quantization_result quantized = quantize(small_cnn_mlp(0), quantizer, data, options);
    const lowered_model lowered = quantize_model(small_cnn_mlp(0), quantizer, data, options);
    const quantization_report measured = measure(small_cnn_mlp(0), lowered, data, options);
    CHECK(measured.sqnr_db == quantized.report.sqnr_db);  // the same lowered model
    REQUIRE(measured.per_layer.size() == quantized.report.per_layer.size());
    REQUIRE(!measured.per_layer.empty());
    for (std::size_t i = 0; i < measured.per_layer.size(); ++i) {
        CAPTURE(quantized.report.per_layer[i].name);
        CHECK(measured.per_layer[i].name == quantized.report.per_layer[i].name);
        CHECK(measured.per_layer[i].sqnr_db == quantized.report.per_layer[i].sqnr_db);
    }
}

TEST_CASE("quantize_model converts data of another floating type to the model's, as quantize() does") {
    // float32 batches and the same values in float64 (exact: every float32 is a float64) must give the
    // same model. Before the one sequence quantize_model skipped the conversion, and the float64
    // calibration batches did not fit the float32 model.
    const quantize_data data{smooth_batches(8, 32, 1), smooth_batches(4, 32, 2), std::nullopt};
    quantize_data doubled = data;
    for (std::vector<batch>* batches : {&doubled.calibration, &doubled.evaluation})
        for (batch& rows : *batches) rows = batch(rows.input().to(at::kDouble));
    const runtime_quantizer quantizer = whole_model("x86_inductor");
    const lowered_model from_float = quantize_model(small_cnn_mlp(0), quantizer, data, {.progress = false});
    const lowered_model from_double = quantize_model(small_cnn_mlp(0), quantizer, doubled, {.progress = false});
    const engine_scope engine(from_float.plan.engine);
    const at::Tensor expected = run_batches(from_float.module.deepcopy(), data.evaluation).tensors.front();
    const at::Tensor actual = run_batches(from_double.module.deepcopy(), data.evaluation).tensors.front();
    CHECK(at::equal(expected, actual));
    // What quantize() reports it converted, quantize_model converts too: the lowered models agree.
    const quantization_result reported =
        quantize(small_cnn_mlp(0), quantizer, doubled, {.per_layer = false, .progress = false});
    CHECK(at::equal(expected, run_batches(reported.model.module.deepcopy(), data.evaluation).tensors.front()));
}

// Toy accuracy steps, one at each point of the sequence and one that no target asks for: named
// only in the list the test hands to the sequence, as a new step is named only in accuracy/steps.hpp.
namespace {
std::vector<std::string> toy_log;

struct toy_calibrated_step {
    static bool applies(const target_plan&) { return true; }
    static void run(prepared_model& calibrated, const std::vector<batch>& calibration) {
        toy_log.push_back("calibrated, " + std::to_string(samples_in(calibration)) + " samples");
        calibrated.adjustments.push_back({"", "toy step on the calibrated model"});
    }
};
struct toy_converted_step {
    static bool applies(const target_plan& target) { return target.corrects_biases; }
    static void run(converted_model& converted, const std::vector<batch>&) {
        toy_log.push_back("converted");
        converted.adjustments.push_back({"", "toy step on the converted model"});
    }
};
struct toy_unasked_step {
    static bool applies(const target_plan& target) { return target.qat; }
    static void run(converted_model&, const std::vector<batch>&) { toy_log.push_back("unasked"); }
};
}  // namespace

TEST_CASE("an accuracy step added to the list runs at the point of the sequence its model names, when asked for") {
    toy_log.clear();
    const quantize_data data{smooth_batches(8, 32, 1), smooth_batches(4, 32, 2), std::nullopt};
    const quantization_plan plan = plan_for(whole_model("x86_inductor:bias_correction"));
    // Listed after the converted model's toy step, before the calibrated one's: the model type places a step.
    const auto steps = boost::hana::concat(
        accuracy_steps, boost::hana::tuple_t<toy_converted_step, toy_unasked_step, toy_calibrated_step>);
    const libtorch::detail::stage_results done =
        libtorch::detail::run_sequence(small_cnn_mlp(0), plan, data, {.progress = false},
                                       libtorch::detail::run_until::lowered, steps);
    CHECK(toy_log == std::vector<std::string>{"calibrated, 256 samples", "converted"});  // 8 batches of 32
    // The notes reach the lowered model in the order the steps ran: the toy converted step after bias
    // correction, which comes before it in the list.
    REQUIRE(done.lowered);
    const std::vector<adjustment>& notes = done.lowered->adjustments;
    const auto position = [&](std::string_view start) {
        const auto starts = [&](const adjustment& note) { return note.change.starts_with(start); };
        return std::find_if(notes.begin(), notes.end(), starts) - notes.begin();
    };
    const auto calibrated = position("toy step on the calibrated"), corrected = position("bias correction:");
    const auto converted = position("toy step on the converted");
    CHECK(calibrated < corrected);
    CHECK(corrected < converted);
    CHECK(converted < static_cast<std::ptrdiff_t>(notes.size()));
    // The default list has no toy step.
    toy_log.clear();
    (void)libtorch::detail::run_sequence(small_cnn_mlp(0), plan, data, {.progress = false});
    CHECK(toy_log.empty());
}

// A calibration policy that does what this_process does and writes down what it was asked.
namespace {
struct recording_policy {
    std::vector<std::string> calls;
    void calibrate(prepared_model& prepared, const std::vector<batch>& batches, bool progress) {
        calls.push_back("calibrate " + std::to_string(samples_in(batches)) + " samples");
        this_process::calibrate(prepared, batches, progress);
    }
    qat_result train(prepared_model& prepared, const at::Tensor& images, const at::Tensor& labels,
                     const qat_options& qat) {
        calls.push_back("train " + std::to_string(qat.training.steps) + " steps");
        return this_process::train(prepared, images, labels, qat);
    }
};
static_assert(calibration_policy<recording_policy>);
}  // namespace

TEST_CASE("the calibration policy given to quantize() calibrates the model it lowers, once; the analysis calibrates "
          "its own in this process") {
    // The distributed CLI run hands across_processes to quantize_to_target; this stands in for it. Its one
    // call is the run's own calibration: what the per-layer analysis quantizes on its own (layers on
    // borrowed grids) it calibrates here, and must not ask other processes to join.
    const quantize_data data{smooth_batches(8, 32, 1), smooth_batches(4, 32, 2), std::nullopt};
    const runtime_quantizer quantizer = whole_model("x86_inductor");
    recording_policy recording;
    const quantization_result given = quantize(small_cnn_mlp(0), quantizer, data, {.progress = false}, recording);
    CHECK(recording.calls == std::vector<std::string>{"calibrate 256 samples"});
    CHECK_FALSE(given.report.per_layer.empty());
    // The policy does what this_process does, so the model is the default's, bit for bit.
    const quantization_result plain = quantize(small_cnn_mlp(0), quantizer, data, {.progress = false});
    const engine_scope engine(plain.model.plan.engine);
    CHECK(at::equal(run_batches(plain.model.module.deepcopy(), data.evaluation).tensors.front(),
                    run_batches(given.model.module.deepcopy(), data.evaluation).tensors.front()));

    // QAT targets train through the policy instead.
    quantize_data training = data;
    const at::Tensor images = concatenate(data.calibration).front();
    training.train_inputs = images;
    training.train_labels = at::arange(images.size(0)) % 10;
    quantize_options brief{.per_layer = false, .progress = false};
    brief.qat.training.steps = 2;
    recording.calls.clear();
    (void)quantize_model(small_cnn_mlp(0), whole_model("x86_inductor:qat"), training, brief, recording);
    CHECK(recording.calls == std::vector<std::string>{"train 2 steps"});
}
