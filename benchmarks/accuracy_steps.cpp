// The accuracy steps (the cle and bias_correction options) on the benchmark models: output SQNR,
// top-1 and the mean output error on the held-out images, with and without each step, and the
// quantize time each adds. Static configurations of both backends (xnnpack also with per-tensor
// weights, where equalization matters most), and the dynamic ones with cle (bias correction needs
// calibration data, which dynamic quantization does not take).
//
//   accuracy_steps OUT.json [--steps N] [--repeats N]
//
// As run for RESULTS.md, from the repository root (benchmarks/run's release build directory):
//   meson compile -C build-bench benchmarks/accuracy_steps
//   build-bench/benchmarks/accuracy_steps benchmarks/results/accuracy_steps.json
//   benchmarks/report.py --out benchmarks/results --root .
//
// The models are trained as torch_models trains them (benchmark_models.hpp; one thread, so on one
// machine the weights are those of RESULTS.md's runtime section), with the same calibration and
// evaluation images; each model's float top-1 is recorded so that report.py can check that.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchmark_models.hpp"

using namespace versatil;
using namespace versatil::libtorch;
using namespace versatil::benchmarks;
using json = nlohmann::json;

namespace {

// The base configurations and the steps added to each.
struct configuration {
    std::string base;
    std::vector<std::string> steps;
};

const std::vector<configuration> configurations{
    {"x86_inductor", {"", "cle", "bias_correction", "cle,bias_correction"}},
    {"xnnpack", {"", "cle", "bias_correction", "cle,bias_correction"}},
    {"xnnpack:per_tensor", {"", "cle", "bias_correction", "cle,bias_correction"}},
    {"x86_inductor:dynamic", {"", "cle"}},
    {"xnnpack:dynamic,per_tensor", {"", "cle"}},
};

}  // namespace

int main(int argc, char** argv) {
    const std::optional<benchmark_arguments> arguments = parse_benchmark_arguments(argc, argv, 3);
    if (!arguments) return 2;
    const auto& [out, steps, repeats] = *arguments;
    try {
        at::set_num_threads(1);
        const benchmark_data loaded = load_benchmark_data();
        const auto& [train, test, calibration, evaluation] = loaded;
        const std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
        json results = {{"command", command_line("accuracy_steps", argc, argv)}, {"date", date},
                        {"load_before", load_average()}};
        results["config"] = {{"steps", steps},
                             {"calibration_images", calibration_batch * calibration_batches},
                             {"test_images", test.images.size(0)},
                             {"quantize_repeats", repeats},
                             {"threads", 1},
                             {"bias_correction_samples", bias_correction_options{}.max_samples}};
        for (const model_entry& entry : benchmark_models()) {
            ::torch::jit::Module model = entry.build();
            (void)train_model(model, entry, train, steps);
            const model_outputs reference = run_batches(model, evaluation);
            json model_json = {{"float_top1", top1_accuracy(reference, test.labels)}};
            std::printf("%s (float top-1 %.2f %%)\n", entry.name.c_str(), 100 * model_json["float_top1"].get<double>());
            for (const configuration& config : configurations) {
                const bool dynamic = config.base.find("dynamic") != std::string::npos;
                const quantize_data data{dynamic ? std::vector<batch>{} : calibration, evaluation, test.labels};
                for (const std::string& added : config.steps) {
                    const std::string spec = with_options(config.base, added);
                    const runtime_quantizer quantizer = whole_model(spec);
                    const auto [lowered, seconds] = quantize_timed(model, quantizer, data, repeats);
                    const engine_scope engine(engine_settings{lowered.plan.engine, 1, std::nullopt});
                    const model_outputs quantized = run_batches(lowered.module.deepcopy(), evaluation);
                    const outputs_comparison comparison = compare_outputs(reference, quantized);
                    const at::Tensor error = quantized.tensors.front().to(at::kDouble) - reference.tensors.front().to(at::kDouble);
                    json steps_done = json::array();
                    for (const adjustment& a : lowered.adjustments)
                        if (a.change.starts_with("cle") || a.change.starts_with("bias correction"))
                            steps_done.push_back(a.module_path + ": " + a.change);
                    json run = {{"spec", spec},
                                {"base", config.base},
                                {"steps", added},
                                {"sqnr_db", comparison.overall.sqnr_db},
                                {"quantized_top1", top1_accuracy(quantized, test.labels)},
                                // |E[q - f]| per logit, averaged over the logits: what bias correction removes.
                                {"mean_output_bias", error.mean(0).abs().mean().item<double>()},
                                {"quantize_seconds", median(seconds)},
                                {"changes", steps_done}};
                    std::printf("  %-40s SQNR %6.2f dB  top-1 %.2f %%  bias %.4f  quantize %.3f s\n", spec.c_str(),
                                run["sqnr_db"].get<double>(), 100 * run["quantized_top1"].get<double>(),
                                run["mean_output_bias"].get<double>(), run["quantize_seconds"].get<double>());
                    std::fflush(stdout);
                    model_json["runs"].push_back(run);
                }
            }
            results["models"][entry.name] = model_json;
        }
        results["load_after"] = load_average();
        std::ofstream(out) << results.dump(2) << '\n';
        return 0;
    } catch (const std::exception& failure) {
        std::fprintf(stderr, "accuracy_steps: %s\n", failure.what());
        return 1;
    }
}
